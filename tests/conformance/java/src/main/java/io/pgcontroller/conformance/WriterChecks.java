package io.pgcontroller.conformance;

import io.pgcontroller.conformance.EventSupport.Keyed;
import io.pravega.client.control.impl.Controller;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.Serializer;
import io.pravega.client.stream.impl.ByteArraySerializer;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;
import static io.pgcontroller.conformance.EventSupport.READ_WITHIN;
import static io.pgcontroller.conformance.EventSupport.STRINGS;
import static io.pgcontroller.conformance.EventSupport.readEachOnceInKeyOrder;
import static io.pgcontroller.conformance.EventSupport.readExactly;
import static io.pgcontroller.conformance.EventSupport.writeAsync;
import static io.pgcontroller.conformance.EventSupport.writer;
import static io.pgcontroller.conformance.WriterSupport.interleaved;
import static io.pgcontroller.conformance.WriterSupport.keys;
import static io.pgcontroller.conformance.WriterSupport.observeNothingAfterTheLast;
import static io.pgcontroller.conformance.WriterSupport.readerFromStart;

/**
 * EventStreamWriter: routing keys and each key's order over several segments, events without a
 * key, noteTime, flush, close, pooled connections, large events (and their refusal without
 * enableLargeEvents), and a writer that keeps writing while its stream scales.
 */
public class WriterChecks {
    private static final int MAX_EVENT = Serializer.MAX_EVENT_SIZE;

    @Check
    public void routingKeysKeepEachKeysOrderAcrossSegments(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(4);
        List<Keyed> written = interleaved(keys("k", 6), 0, 50);
        awaitAll(writeAsync(writer(ctx, target), written));

        EventStreamReader<String> reader = readerFromStart(ctx, target);
        ctx.observe("events read", readEachOnceInKeyOrder(reader, written).size());
        observeNothingAfterTheLast(ctx, reader);
    }

    @Check
    public void eventsWithoutARoutingKeyAreAllDelivered(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(3);
        EventStreamWriter<String> writer = writer(ctx, target);
        List<String> written = EventSupport.numbered("nokey:", 0, 60);
        List<CompletableFuture<Void>> acks = new ArrayList<>();
        for (String event : written) {
            acks.add(writer.writeEvent(event));
        }
        awaitAll(acks);

        EventStreamReader<String> reader = readerFromStart(ctx, target);
        List<String> read = readExactly(reader, written.size(), READ_WITHIN);
        // Without a key no order is promised, only that each event arrives once.
        equal(new HashSet<>(written), new HashSet<>(read), "events read");
        ctx.observe("events read", read.size());
        observeNothingAfterTheLast(ctx, reader);
    }

    /** noteTime is fire-and-forget (the controller's answer is only logged): the writer goes on writing. */
    @Check
    public void noteTimeIsAcceptedAndTheWriterGoesOn(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(2);
        EventStreamWriter<String> writer = ctx.closeLater(target.factory().createEventWriter("w1", target.name(), STRINGS,
                EventWriterConfig.builder().build()));
        writer.writeEvent("k", "k:0").get(30, TimeUnit.SECONDS);
        long now = System.currentTimeMillis();
        ctx.observe("noteTime", Ctx.thrown(() -> writer.noteTime(now)));
        ctx.observe("noteTime later", Ctx.thrown(() -> writer.noteTime(now + 1000)));
        writer.writeEvent("k", "k:1").get(30, TimeUnit.SECONDS);

        equal(List.of("k:0", "k:1"), readExactly(readerFromStart(ctx, target), 2, READ_WITHIN), "events read");
    }

    /**
     * flush returns once the segment store has acknowledged every event, so the segments' lengths
     * already hold them all. (The client completes the events' futures on another thread after
     * flush's latch opens: Pravega's own run saw 157 of 200 done when flush returned, so the
     * futures are awaited, not counted.)
     */
    @Check
    public void flushReturnsOnceEveryEventIsStored(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(3);
        EventStreamWriter<String> writer = writer(ctx, target);
        List<Keyed> written = interleaved(keys("f", 4), 0, 50);
        List<CompletableFuture<Void>> acks = writeAsync(writer, written);
        writer.flush();
        long stored = StreamManagerSupport.totalOffset(StreamManagerSupport.tail(ctx, target));
        ctx.observe("bytes stored when flush returned", stored);
        equal(eventBytes(written), stored, "bytes in the segments when flush returned");
        awaitAll(acks);

        EventStreamReader<String> reader = readerFromStart(ctx, target);
        readEachOnceInKeyOrder(reader, written);
        observeNothingAfterTheLast(ctx, reader);
    }

    @Check
    public void aClosedWriterRefusesWrites(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(1);
        EventStreamWriter<String> writer = writer(ctx, target);
        writer.writeEvent("k", "k:0").get(30, TimeUnit.SECONDS);
        writer.close();
        ctx.observe("writeEvent after close", Ctx.thrown(() -> writer.writeEvent("k", "k:1")));
        ctx.observe("writeEvents after close", Ctx.thrown(() -> writer.writeEvents("k", List.of("k:1"))));
        ctx.observe("flush after close", Ctx.thrown(writer::flush));
        ctx.observe("close again", Ctx.thrown(writer::close));

        EventStreamReader<String> reader = readerFromStart(ctx, target);
        equal(List.of("k:0"), readExactly(reader, 1, READ_WITHIN), "events read");
        observeNothingAfterTheLast(ctx, reader);
    }

    @Check
    public void pooledWritersShareConnectionsAndKeepTheirOrder(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(3);
        EventWriterConfig pooled = EventWriterConfig.builder().enableConnectionPooling(true).build();
        EventStreamWriter<String> first = ctx.closeLater(target.factory().createEventWriter(target.name(), STRINGS, pooled));
        EventStreamWriter<String> second = ctx.closeLater(target.factory().createEventWriter(target.name(), STRINGS, pooled));
        // Each writer keeps each key's order, and no order holds between the two writers: the
        // events of the first writer are keyed a-<key> here, those of the second b-<key>.
        List<Keyed> written = new ArrayList<>();
        List<CompletableFuture<Void>> acks = new ArrayList<>();
        for (Keyed event : interleaved(keys("p", 4), 0, 25)) {
            written.add(new Keyed("a-" + event.key(), "a-" + event.event()));
            acks.add(first.writeEvent(event.key(), "a-" + event.event()));
            written.add(new Keyed("b-" + event.key(), "b-" + event.event()));
            acks.add(second.writeEvent(event.key(), "b-" + event.event()));
        }
        awaitAll(acks);

        EventStreamReader<String> reader = readerFromStart(ctx, target);
        ctx.observe("events read", readEachOnceInKeyOrder(reader, written).size());
        observeNothingAfterTheLast(ctx, reader);
    }

    /** Events above 8 MiB go through a transient segment merged into the stream's segment. */
    @Check(timeoutSeconds = 180) // 17 MiB written and read back (twice: serve and Pravega)
    public void largeEventsRoundTripWhenEnabled(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(1);
        EventStreamWriter<byte[]> writer = ctx.closeLater(target.factory().createEventWriter(target.name(),
                new ByteArraySerializer(), EventWriterConfig.builder().enableLargeEvents(true).build()));
        List<byte[]> written = List.of(bytes(10, 1), bytes(MAX_EVENT + 1, 2), bytes(10, 3), bytes(9 * 1024 * 1024, 4));
        for (byte[] event : written) {
            writer.writeEvent("k", event).get(60, TimeUnit.SECONDS);
        }

        List<byte[]> read = readExactly(readerFromStart(ctx, target, new ByteArraySerializer()), written.size(),
                Duration.ofSeconds(90));
        List<Integer> sizes = new ArrayList<>();
        for (int i = 0; i < written.size(); i++) {
            require(Arrays.equals(written.get(i), read.get(i)), "event " + i + " read back with other bytes");
            sizes.add(read.get(i).length);
        }
        ctx.observe("sizes read", sizes);
    }

    @Check
    public void anEventAbove8MiBIsRefusedWithoutLargeEvents(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(1);
        EventStreamWriter<byte[]> writer = ctx.closeLater(target.factory().createEventWriter(target.name(),
                new ByteArraySerializer(), EventWriterConfig.builder().build()));
        byte[] tooLarge = bytes(MAX_EVENT + 1, 5);
        ctx.observe("8 MiB + 1", Ctx.thrown(() -> writer.writeEvent("k", tooLarge).get(60, TimeUnit.SECONDS)));
        // The largest event an ordinary append carries: 8 MiB of data behind its 8-byte header.
        byte[] largest = bytes(MAX_EVENT, 6);
        ctx.observe("8 MiB", Ctx.thrown(() -> writer.writeEvent("k", largest).get(60, TimeUnit.SECONDS)));

        List<byte[]> read = readExactly(readerFromStart(ctx, target, new ByteArraySerializer()), 1, READ_WITHIN);
        require(Arrays.equals(largest, read.get(0)), "the 8 MiB event read back with other bytes");
    }

    /** Scales the stream while the writer writes: the writer moves to the successors, each key stays in order. */
    @Check
    public void aWriterKeepsEachKeysOrderWhileItsStreamScales(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(2);
        EventStreamWriter<String> writer = writer(ctx, target);
        ScheduledExecutorService executor = ctx.executor();
        Controller controller = ControllerSupport.controller(ctx);
        List<String> keys = keys("s", 6);
        List<CompletableFuture<Void>> acks = new ArrayList<>(writeAsync(writer, interleaved(keys, 0, 20)));
        // Segment 0 ([0, 0.5)) splits in two while the next events are on their way.
        CompletableFuture<Boolean> scale = controller.scaleStream(target.stream(),
                List.of(ControllerSupport.segmentId(0, 0)), Map.of(0.0, 0.25, 0.25, 0.5), executor).getFuture();
        acks.addAll(writeAsync(writer, interleaved(keys, 20, 40)));
        ctx.observe("scale", scale.get(60, TimeUnit.SECONDS));
        acks.addAll(writeAsync(writer, interleaved(keys, 40, 60)));
        awaitAll(acks);
        ctx.observe("segments after the scale", controller.getCurrentSegments(target.scope(), target.name())
                .get(30, TimeUnit.SECONDS).getSegments().size());

        EventStreamReader<String> reader = readerFromStart(ctx, target);
        readEachOnceInKeyOrder(reader, interleaved(keys, 0, 60));
        observeNothingAfterTheLast(ctx, reader);
    }

    /** What events take in a segment: each its UTF-8 bytes behind an 8-byte header. */
    private static long eventBytes(List<Keyed> events) {
        return events.stream().mapToLong(event -> 8 + event.event().getBytes(StandardCharsets.UTF_8).length).sum();
    }

    private static void awaitAll(List<CompletableFuture<Void>> acks) throws Exception {
        CompletableFuture.allOf(acks.toArray(new CompletableFuture<?>[0])).get(60, TimeUnit.SECONDS);
    }

    /** {@code size} bytes of a fixed pseudo-random pattern: a misplaced chunk does not compare equal. */
    private static byte[] bytes(int size, long seed) {
        byte[] data = new byte[size];
        new Random(seed).nextBytes(data);
        return data;
    }
}
