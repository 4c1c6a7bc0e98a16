package io.redislease;

import java.time.Duration;

/**
 * A live lease as {@code LEASE.GET} reports it. {@code pttl} is the server's remaining time,
 * already old when it arrives: show it, never decide on it.
 */
public record LeaseInfo(String owner, long token, Duration pttl) {}
