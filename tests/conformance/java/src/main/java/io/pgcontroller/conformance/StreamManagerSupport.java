package io.pgcontroller.conformance;

import io.pgcontroller.conformance.EventSupport.Keyed;
import io.pravega.client.admin.StreamInfo;
import io.pravega.client.stream.Stream;
import io.pravega.client.stream.StreamCut;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * What the stream, scope and other checks share about StreamManager: expectations it must meet,
 * fetchStreamInfo and the cuts in it, events named {@code event-<i>}, and its listings as lists.
 */
final class StreamManagerSupport {
    private StreamManagerSupport() {
    }

    /** Records what the server answered and requires what Pravega's contract says it answers. */
    static void expect(Ctx ctx, String key, Object expected, Object actual) {
        ctx.observe(key, actual);
        Ctx.equal(expected, actual, key);
    }

    static StreamInfo info(Ctx ctx, String scope, String stream) throws Exception {
        return ctx.streamManager().fetchStreamInfo(scope, stream).get(Ctx.ANSWER_SECONDS, TimeUnit.SECONDS);
    }

    static StreamCut head(Ctx ctx, ScopedStream target) throws Exception {
        return info(ctx, target.scope(), target.name()).getHeadStreamCut();
    }

    static StreamCut tail(Ctx ctx, ScopedStream target) throws Exception {
        return info(ctx, target.scope(), target.name()).getTailStreamCut();
    }

    /** The offsets of a cut, by segment; the segments' ids are generated, so only their count and offsets are compared. */
    static Map<?, Long> positions(StreamCut cut) {
        return cut.asImpl().getPositions();
    }

    static long totalOffset(StreamCut cut) {
        return positions(cut).values().stream().mapToLong(Long::longValue).sum();
    }

    /** Events event-<from> .. event-<to - 1>, each under a routing key of its own (key-<i>). */
    static List<Keyed> events(int from, int to) {
        return EventSupport.numberedEvents("event-", from, to, i -> "key-" + i);
    }

    static <T> List<T> list(Iterator<T> iterator) {
        List<T> items = new ArrayList<>();
        iterator.forEachRemaining(items::add);
        return items;
    }

    static List<String> streamNames(Iterator<Stream> streams) {
        List<String> names = new ArrayList<>();
        streams.forEachRemaining(stream -> names.add(stream.getStreamName()));
        return names;
    }
}
