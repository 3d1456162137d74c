package io.pgcontroller.conformance;

import io.pgcontroller.conformance.EventSupport.Keyed;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.ReaderGroupConfig;
import io.pravega.client.stream.Serializer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * What the writer and transaction checks share: events {@code key:seq} of a few keys, one of each
 * key in turn, and a reader that reads a stream from its start, across scales.
 */
final class WriterSupport {
    /** Long enough for a reader of a few segments to have seen every one of them. */
    static final Duration NOTHING_MORE = Duration.ofSeconds(1);
    private static final long CHECKPOINT_MILLIS = 300;

    private WriterSupport() {
    }

    /** The keys {@code prefix0} .. {@code prefix<count - 1>}. */
    static List<String> keys(String prefix, int count) {
        return EventSupport.numbered(prefix, 0, count);
    }

    /**
     * Events {@code key:seq} for seq in [from, to), one of each key in turn, so that the keys' events
     * interleave on the wire; each under its key.
     */
    static List<Keyed> interleaved(List<String> keys, int from, int to) {
        List<Keyed> events = new ArrayList<>();
        for (int seq = from; seq < to; seq++) {
            for (String key : keys) {
                events.add(new Keyed(key, key + ":" + seq));
            }
        }
        return events;
    }

    /**
     * The reader of a new reader group on the stream, positioned at its start. A 0.13 reader hands a
     * sealed segment over to its successors only right after a checkpoint, so the group checkpoints
     * itself often: without that a reader stops at the first scale.
     */
    static <T> EventStreamReader<T> readerFromStart(Ctx ctx, ScopedStream target, Serializer<T> serializer) {
        ReaderGroupConfig config = ReaderGroupConfig.builder()
                .stream(target.stream())
                .automaticCheckpointIntervalMillis(CHECKPOINT_MILLIS)
                .build();
        return EventSupport.readerOfNewGroup(ctx, ctx.readerGroupManager(target.scope()), target.factory(), config,
                serializer);
    }

    static EventStreamReader<String> readerFromStart(Ctx ctx, ScopedStream target) {
        return readerFromStart(ctx, target, EventSupport.STRINGS);
    }

    /** Records how many events came after the last one written: none, unless one was duplicated. */
    static void observeNothingAfterTheLast(Ctx ctx, EventStreamReader<String> reader) {
        ctx.observe("events after the last", EventSupport.readRemaining(reader, NOTHING_MORE).size());
    }
}
