/**
 * redis-lease: leader election on the redis-lease Redis module, for Node.js on ioredis.
 * See README.md. The pure decisions are in ./decide.js (also exported as "redis-lease/decide").
 */
export {
  Elector,
  LeadershipLost,
  defaultOwner,
  decisionConfig,
  type ElectorOptions,
  type LeaderContext,
  type ElectedEvent,
  type SteppedDownEvent,
  type ElectorEvents,
  type RunOutcome,
  ErrorKind,
  StepDownReason,
} from "./elector.js";
export { withLeadership, LeaseClient, type LeadershipSettings } from "./using.js";
export { resignOnSignals, type Resignable } from "./signals.js";
export { fence, FencedError, type CommandArg } from "./fence.js";
export { consoleLogger, jsonLogger, type Logger, type LogFields, type LogLevel } from "./log.js";
export { noMetrics, type MetricsSink } from "./metrics.js";
export { membershipIdOf } from "./quorum.js";
export { SAFE_REDIS_OPTIONS, ProtocolError, parseToken, type ConnectionSpec, type LeaseInfo, type RedisConnection } from "./transport.js";
