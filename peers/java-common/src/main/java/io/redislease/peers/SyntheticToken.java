package io.redislease.peers;

/**
 * A stand-in fencing token for a library that gives none (Redisson {@code RLock}): the grant
 * instant in microseconds of CLOCK_MONOTONIC, times 64, plus the elector's slot. CLOCK_MONOTONIC
 * is one clock for every process on the machine, so a later grant anywhere carries a higher
 * token and the checker's token rules read as "granted later" (acted_after_newer_grant: a reign
 * acted after a later reign was granted). The slot keeps two grants in the same microsecond
 * apart. Such a campaign runs with {@code --no-fence}: the resource must not refuse writes by a
 * token the library never issued, so the checker counts what a user of the library suffers.
 * Below 2^53 for 4.4 years of uptime.
 */
public final class SyntheticToken {
    private SyntheticToken() {}

    public static long at(long monotonicNs, int slot) {
        return (monotonicNs / 1000) * 64 + Math.floorMod(slot, 64);
    }
}
