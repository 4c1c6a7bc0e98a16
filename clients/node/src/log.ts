/**
 * Logging: an injectable logger with one method per level, each taking a message and a flat
 * object of fields (key, owner, token, reason on every transition). The shape fits console,
 * and adapts to pino/winston in one line (see README). Default: console, info and above.
 */
export type LogFields = Record<string, string | number | boolean | null | undefined>;

export interface Logger {
  debug(msg: string, fields: LogFields): void;
  info(msg: string, fields: LogFields): void;
  warn(msg: string, fields: LogFields): void;
  error(msg: string, fields: LogFields): void;
}

export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";
const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 99 };

/** A console logger printing `redis-lease: <msg> {fields}` at `level` and above. */
export function consoleLogger(level: LogLevel = "info"): Logger {
  const on = (l: LogLevel): boolean => ORDER[l] >= ORDER[level];
  return {
    debug: (m, f) => {
      if (on("debug")) console.debug(`redis-lease: ${m}`, f);
    },
    info: (m, f) => {
      if (on("info")) console.info(`redis-lease: ${m}`, f);
    },
    warn: (m, f) => {
      if (on("warn")) console.warn(`redis-lease: ${m}`, f);
    },
    error: (m, f) => {
      if (on("error")) console.error(`redis-lease: ${m}`, f);
    },
  };
}

/** A logger writing one JSON object per line to a stream (the conformance elector's stderr). */
export function jsonLogger(write: (line: string) => void, level: LogLevel = "info"): Logger {
  const at = (l: LogLevel) => (msg: string, fields: LogFields): void => {
    if (ORDER[l] >= ORDER[level]) write(JSON.stringify({ level: l, msg, ...fields }) + "\n");
  };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}
