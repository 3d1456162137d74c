package io.pgcontroller.conformance;

import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.stream.Stream;

/**
 * Where a check of events starts ({@link Ctx#newScopedStream}): a new scope of its own, one new
 * stream in it, and a client factory of that scope, closed when the check ends.
 */
public record ScopedStream(String scope, String name, EventStreamClientFactory factory) {
    /** The stream as the client's APIs take it. */
    public Stream stream() {
        return Stream.of(scope, name);
    }
}
