package io.pgcontroller.conformance;

import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.control.impl.Controller;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.Serializer;
import io.pravega.client.stream.impl.ByteArraySerializer;

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
import static io.pgcontroller.conformance.WriterSupport.STRINGS;

/**
 * EventStreamWriter: routing keys and each key's order over several segments, events without a
 * key, noteTime, flush, close, pooled connections, large events (and their refusal without
 * enableLargeEvents), and a writer that keeps writing while its stream scales.
 */
public class WriterChecks {
    private static final Duration READ_WITHIN = Duration.ofSeconds(60);
    /** Long enough for a reader of a few segments to have seen every one of them. */
    private static final Duration NOTHING_MORE = Duration.ofSeconds(1);
    private static final int MAX_EVENT = Serializer.MAX_EVENT_SIZE;

    @Check
    public void routingKeysKeepEachKeysOrderAcrossSegments(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 4);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventStreamWriter<String> writer = WriterSupport.writer(ctx, factory, stream);
        List<String> keys = keys("k", 6);
        awaitAll(writeInterleaved(writer, keys, 50));

        WriterSupport.Reader<String> reader = WriterSupport.reader(ctx, factory, scope, stream);
        List<String> read = reader.read(300, READ_WITHIN);
        WriterSupport.requireInOrder(read, keys, 50);
        ctx.observe("events read", read.size());
        ctx.observe("events after the last", reader.readRemaining(NOTHING_MORE).size());
    }

    @Check
    public void eventsWithoutARoutingKeyAreAllDelivered(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 3);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventStreamWriter<String> writer = WriterSupport.writer(ctx, factory, stream);
        List<CompletableFuture<Void>> acks = new ArrayList<>();
        List<String> written = new ArrayList<>();
        for (int i = 0; i < 60; i++) {
            written.add("nokey:" + i);
            acks.add(writer.writeEvent("nokey:" + i));
        }
        awaitAll(acks);

        WriterSupport.Reader<String> reader = WriterSupport.reader(ctx, factory, scope, stream);
        List<String> read = reader.read(written.size(), READ_WITHIN);
        // Without a key no order is promised, only that each event arrives once.
        equal(new HashSet<>(written), new HashSet<>(read), "events read");
        ctx.observe("events read", read.size());
        ctx.observe("events after the last", reader.readRemaining(NOTHING_MORE).size());
    }

    /** noteTime is fire-and-forget (the controller's answer is only logged): the writer goes on writing. */
    @Check
    public void noteTimeIsAcceptedAndTheWriterGoesOn(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventStreamWriter<String> writer = ctx.closeLater(factory.createEventWriter("w1", stream, STRINGS,
                EventWriterConfig.builder().build()));
        writer.writeEvent("k", "k:0").get(30, TimeUnit.SECONDS);
        long now = System.currentTimeMillis();
        ctx.observe("noteTime", Ctx.thrown(() -> writer.noteTime(now)));
        ctx.observe("noteTime later", Ctx.thrown(() -> writer.noteTime(now + 1000)));
        writer.writeEvent("k", "k:1").get(30, TimeUnit.SECONDS);

        List<String> read = WriterSupport.reader(ctx, factory, scope, stream).read(2, READ_WITHIN);
        equal(List.of("k:0", "k:1"), read, "events read");
    }

    /**
     * flush returns once the segment store has acknowledged every event, so the segments' lengths
     * already hold them all. (The client completes the events' futures on another thread after
     * flush's latch opens: Pravega's own run saw 157 of 200 done when flush returned, so the
     * futures are awaited, not counted.)
     */
    @Check
    public void flushReturnsOnceEveryEventIsStored(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 3);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventStreamWriter<String> writer = WriterSupport.writer(ctx, factory, stream);
        List<String> keys = keys("f", 4);
        List<CompletableFuture<Void>> acks = writeInterleaved(writer, keys, 50);
        writer.flush();
        long stored = WriterSupport.tailBytes(ctx, scope, stream);
        ctx.observe("bytes stored when flush returned", stored);
        equal(eventBytes(keys, 50), stored, "bytes in the segments when flush returned");
        awaitAll(acks);

        WriterSupport.Reader<String> reader = WriterSupport.reader(ctx, factory, scope, stream);
        List<String> read = reader.read(200, READ_WITHIN);
        WriterSupport.requireInOrder(read, keys, 50);
        ctx.observe("events after the last", reader.readRemaining(NOTHING_MORE).size());
    }

    @Check
    public void aClosedWriterRefusesWrites(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventStreamWriter<String> writer = WriterSupport.writer(ctx, factory, stream);
        writer.writeEvent("k", "k:0").get(30, TimeUnit.SECONDS);
        writer.close();
        ctx.observe("writeEvent after close", Ctx.thrown(() -> writer.writeEvent("k", "k:1")));
        ctx.observe("writeEvents after close", Ctx.thrown(() -> writer.writeEvents("k", List.of("k:1"))));
        ctx.observe("flush after close", Ctx.thrown(writer::flush));
        ctx.observe("close again", Ctx.thrown(writer::close));

        WriterSupport.Reader<String> reader = WriterSupport.reader(ctx, factory, scope, stream);
        equal(List.of("k:0"), reader.read(1, READ_WITHIN), "events read");
        ctx.observe("events after the last", reader.readRemaining(NOTHING_MORE).size());
    }

    @Check
    public void pooledWritersShareConnectionsAndKeepTheirOrder(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 3);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventWriterConfig pooled = EventWriterConfig.builder().enableConnectionPooling(true).build();
        EventStreamWriter<String> first = ctx.closeLater(factory.createEventWriter(stream, STRINGS, pooled));
        EventStreamWriter<String> second = ctx.closeLater(factory.createEventWriter(stream, STRINGS, pooled));
        List<String> keys = keys("p", 4);
        List<CompletableFuture<Void>> acks = new ArrayList<>();
        for (int seq = 0; seq < 25; seq++) {
            for (String key : keys) {
                acks.add(first.writeEvent(key, "a-" + key + ":" + seq));
                acks.add(second.writeEvent(key, "b-" + key + ":" + seq));
            }
        }
        awaitAll(acks);

        WriterSupport.Reader<String> reader = WriterSupport.reader(ctx, factory, scope, stream);
        List<String> read = reader.read(200, READ_WITHIN);
        List<String> labels = new ArrayList<>();
        keys.forEach(key -> labels.addAll(List.of("a-" + key, "b-" + key)));
        WriterSupport.requireInOrder(read, labels, 25);
        ctx.observe("events read", read.size());
        ctx.observe("events after the last", reader.readRemaining(NOTHING_MORE).size());
    }

    /** Events above 8 MiB go through a transient segment merged into the stream's segment. */
    @Check(timeoutSeconds = 180) // 17 MiB written and read back (twice: serve and Pravega)
    public void largeEventsRoundTripWhenEnabled(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventStreamWriter<byte[]> writer = ctx.closeLater(factory.createEventWriter(stream, new ByteArraySerializer(),
                EventWriterConfig.builder().enableLargeEvents(true).build()));
        List<byte[]> written = List.of(bytes(10, 1), bytes(MAX_EVENT + 1, 2), bytes(10, 3), bytes(9 * 1024 * 1024, 4));
        for (byte[] event : written) {
            writer.writeEvent("k", event).get(60, TimeUnit.SECONDS);
        }

        List<byte[]> read = WriterSupport.reader(ctx, factory, scope, stream, new ByteArraySerializer())
                .read(written.size(), Duration.ofSeconds(90));
        List<Integer> sizes = new ArrayList<>();
        for (int i = 0; i < written.size(); i++) {
            require(Arrays.equals(written.get(i), read.get(i)), "event " + i + " read back with other bytes");
            sizes.add(read.get(i).length);
        }
        ctx.observe("sizes read", sizes);
    }

    @Check
    public void anEventAbove8MiBIsRefusedWithoutLargeEvents(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventStreamWriter<byte[]> writer = ctx.closeLater(factory.createEventWriter(stream, new ByteArraySerializer(),
                EventWriterConfig.builder().build()));
        byte[] tooLarge = bytes(MAX_EVENT + 1, 5);
        ctx.observe("8 MiB + 1", Ctx.thrown(() -> writer.writeEvent("k", tooLarge).get(60, TimeUnit.SECONDS)));
        // The largest event an ordinary append carries: 8 MiB of data behind its 8-byte header.
        byte[] largest = bytes(MAX_EVENT, 6);
        ctx.observe("8 MiB", Ctx.thrown(() -> writer.writeEvent("k", largest).get(60, TimeUnit.SECONDS)));

        List<byte[]> read = WriterSupport.reader(ctx, factory, scope, stream, new ByteArraySerializer())
                .read(1, READ_WITHIN);
        require(Arrays.equals(largest, read.get(0)), "the 8 MiB event read back with other bytes");
    }

    /** Scales the stream while the writer writes: the writer moves to the successors, each key stays in order. */
    @Check
    public void aWriterKeepsEachKeysOrderWhileItsStreamScales(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventStreamWriter<String> writer = WriterSupport.writer(ctx, factory, stream);
        ScheduledExecutorService executor = WriterSupport.executor(ctx);
        Controller controller = WriterSupport.controller(ctx, executor, 10);
        List<String> keys = keys("s", 6);
        List<CompletableFuture<Void>> acks = new ArrayList<>(writeRange(writer, keys, 0, 20));
        // Segment 0 ([0, 0.5)) splits in two while the next events are on their way.
        CompletableFuture<Boolean> scale = controller.scaleStream(io.pravega.client.stream.Stream.of(scope, stream),
                List.of(WriterSupport.segmentId(0, 0)), Map.of(0.0, 0.25, 0.25, 0.5), executor).getFuture();
        acks.addAll(writeRange(writer, keys, 20, 40));
        ctx.observe("scale", scale.get(60, TimeUnit.SECONDS));
        acks.addAll(writeRange(writer, keys, 40, 60));
        awaitAll(acks);
        ctx.observe("segments after the scale", controller.getCurrentSegments(scope, stream)
                .get(30, TimeUnit.SECONDS).getSegments().size());

        WriterSupport.Reader<String> reader = WriterSupport.reader(ctx, factory, scope, stream);
        List<String> read = reader.read(keys.size() * 60, READ_WITHIN);
        WriterSupport.requireInOrder(read, keys, 60);
        ctx.observe("events after the last", reader.readRemaining(NOTHING_MORE).size());
    }

    static List<String> keys(String prefix, int count) {
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            keys.add(prefix + i);
        }
        return keys;
    }

    /** Events {@code key:seq}, one of each key in turn, so that the keys' events interleave on the wire. */
    static List<CompletableFuture<Void>> writeInterleaved(EventStreamWriter<String> writer, List<String> keys, int perKey) {
        return writeRange(writer, keys, 0, perKey);
    }

    static List<CompletableFuture<Void>> writeRange(EventStreamWriter<String> writer, List<String> keys, int from, int to) {
        List<CompletableFuture<Void>> acks = new ArrayList<>();
        for (int seq = from; seq < to; seq++) {
            for (String key : keys) {
                acks.add(writer.writeEvent(key, key + ":" + seq));
            }
        }
        return acks;
    }

    /** What {@code key:seq} events take in a segment: each its UTF-8 bytes behind an 8-byte header. */
    static long eventBytes(List<String> keys, int perKey) {
        long total = 0;
        for (int seq = 0; seq < perKey; seq++) {
            for (String key : keys) {
                total += 8 + (key + ":" + seq).getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
            }
        }
        return total;
    }

    static void awaitAll(List<CompletableFuture<Void>> acks) throws Exception {
        CompletableFuture.allOf(acks.toArray(new CompletableFuture<?>[0])).get(60, TimeUnit.SECONDS);
    }

    /** {@code size} bytes of a fixed pseudo-random pattern: a misplaced chunk does not compare equal. */
    private static byte[] bytes(int size, long seed) {
        byte[] data = new byte[size];
        new Random(seed).nextBytes(data);
        return data;
    }
}
