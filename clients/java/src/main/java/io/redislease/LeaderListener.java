package io.redislease;

import java.util.Optional;

/**
 * Told when the observed leader of the key changes (polled with {@code LEASE.GET}, which is
 * allowed on replicas). Empty = no live lease. Called on the elector's observer thread.
 */
@FunctionalInterface
public interface LeaderListener {
    void onLeaderChanged(Optional<LeaseInfo> leader);
}
