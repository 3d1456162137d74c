package io.pgcontroller.conformance;

import io.pravega.client.BatchClientFactory;
import io.pravega.client.control.impl.ControllerImpl;
import io.pravega.client.control.impl.ControllerImplConfig;
import io.pravega.client.batch.SegmentIterator;
import io.pravega.client.batch.SegmentRange;
import io.pravega.client.batch.StreamSegmentsIterator;
import io.pravega.client.segment.impl.Segment;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.Stream;
import io.pravega.client.stream.StreamCut;
import io.pravega.client.stream.impl.UTF8StringSerializer;
import io.pravega.common.concurrent.ExecutorServiceHelpers;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;

/**
 * BatchClientFactory: getSegments between stream cuts (unbounded, null and real cuts from
 * fetchStreamInfo) and readSegment of every range, on a fixed stream, across two scales (each
 * epoch's events read exactly once), and after truncations (events before the cut are gone, a
 * range listed before the truncation cannot be read).
 */
public class BatchChecks {
    private static final UTF8StringSerializer SERIALIZER = new UTF8StringSerializer();
    private static final int EVENTS_PER_PHASE = 30;

    @Check
    public void getSegmentsBetweenCutsReadsEachPhaseExactly(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 3);
        Stream target = Stream.of(scope, stream);
        EventStreamWriter<String> writer = writer(ctx, scope, stream);
        BatchClientFactory batch = batch(ctx, scope);

        List<String> first = write(writer, "a");
        StreamCut afterFirst = tail(ctx, scope, stream);
        List<String> second = write(writer, "b");
        StreamCut afterSecond = tail(ctx, scope, stream);
        List<String> third = write(writer, "c");

        observeRead(ctx, "unbounded", batch, batch.getSegments(target, StreamCut.UNBOUNDED, StreamCut.UNBOUNDED),
                concat(first, second, third));
        observeRead(ctx, "null cuts", batch, batch.getSegments(target, null, null), concat(first, second, third));
        observeRead(ctx, "to the first cut", batch, batch.getSegments(target, StreamCut.UNBOUNDED, afterFirst), first);
        StreamSegmentsIterator between = batch.getSegments(target, afterFirst, afterSecond);
        ctx.observe("between cuts: start cut echoed", afterFirst.equals(between.getStartStreamCut()));
        ctx.observe("between cuts: end cut echoed", afterSecond.equals(between.getEndStreamCut()));
        observeRead(ctx, "between cuts", batch, between, second);
        observeRead(ctx, "from the second cut", batch, batch.getSegments(target, afterSecond, StreamCut.UNBOUNDED), third);
    }

    @Check
    public void getSegmentsAcrossScalesReadsEveryEpochOnce(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        Stream target = Stream.of(scope, stream);
        EventStreamWriter<String> writer = writer(ctx, scope, stream);
        BatchClientFactory batch = batch(ctx, scope);
        Scaler scaler = new Scaler(ctx);

        List<String> epoch0 = write(writer, "e0");
        StreamCut inEpoch0 = tail(ctx, scope, stream);
        scaler.replaceAll(target, 0.0, 0.4, 0.7, 1.0);
        List<String> epoch1 = write(writer, "e1");
        StreamCut inEpoch1 = tail(ctx, scope, stream);
        scaler.replaceAll(target, 0.0, 0.5, 1.0);
        List<String> epoch2 = write(writer, "e2");

        observeRead(ctx, "whole stream", batch, batch.getSegments(target, StreamCut.UNBOUNDED, StreamCut.UNBOUNDED),
                concat(epoch0, epoch1, epoch2));
        observeRead(ctx, "epoch 0 only", batch, batch.getSegments(target, StreamCut.UNBOUNDED, inEpoch0), epoch0);
        observeRead(ctx, "epoch 1 only", batch, batch.getSegments(target, inEpoch0, inEpoch1), epoch1);
        observeRead(ctx, "from epoch 1", batch, batch.getSegments(target, inEpoch1, StreamCut.UNBOUNDED), epoch2);
        observeRead(ctx, "from epoch 0 to the tail", batch, batch.getSegments(target, inEpoch0, StreamCut.UNBOUNDED),
                concat(epoch1, epoch2));
    }

    @Check
    public void getSegmentsAfterTruncationLeavesOutEarlierEvents(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        Stream target = Stream.of(scope, stream);
        EventStreamWriter<String> writer = writer(ctx, scope, stream);
        BatchClientFactory batch = batch(ctx, scope);

        List<String> before = write(writer, "old");
        StreamCut cut = tail(ctx, scope, stream);
        List<String> after = write(writer, "new");
        List<SegmentRange> listedBefore = ranges(batch.getSegments(target, StreamCut.UNBOUNDED, StreamCut.UNBOUNDED));
        require(!before.isEmpty(), "events before the cut");

        require(ctx.streamManager().truncateStream(scope, stream, cut), "truncateStream answered false");
        ctx.observe("head cut = truncation cut", cut.equals(ctx.streamManager().fetchStreamInfo(scope, stream)
                .get(30, TimeUnit.SECONDS).getHeadStreamCut()));
        observeRead(ctx, "after truncation", batch, batch.getSegments(target, StreamCut.UNBOUNDED, StreamCut.UNBOUNDED),
                after);
        observeRead(ctx, "after truncation, null cuts", batch, batch.getSegments(target, null, null), after);
        String stale = Ctx.thrown(() -> readAll(batch, listedBefore));
        ctx.observe("reading a range listed before the truncation", stale);
        equal("TruncatedDataException", stale, "reading a range listed before the truncation");
    }

    @Check
    public void truncationAfterScaleDropsTheEarlierEpochs(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        Stream target = Stream.of(scope, stream);
        EventStreamWriter<String> writer = writer(ctx, scope, stream);
        BatchClientFactory batch = batch(ctx, scope);
        Scaler scaler = new Scaler(ctx);

        write(writer, "e0");
        List<SegmentRange> epoch0Ranges = ranges(batch.getSegments(target, StreamCut.UNBOUNDED, StreamCut.UNBOUNDED));
        scaler.replaceAll(target, 0.0, 0.4, 0.7, 1.0);
        write(writer, "e1a");
        StreamCut inEpoch1 = tail(ctx, scope, stream);
        List<String> later = write(writer, "e1b");
        scaler.replaceAll(target, 0.0, 0.5, 1.0);
        later.addAll(write(writer, "e2"));

        require(ctx.streamManager().truncateStream(scope, stream, inEpoch1), "truncateStream answered false");
        observeRead(ctx, "after truncation", batch, batch.getSegments(target, StreamCut.UNBOUNDED, StreamCut.UNBOUNDED),
                later);
        String stale = Ctx.thrown(() -> readAll(batch, epoch0Ranges));
        ctx.observe("reading an epoch-0 range listed before the truncation", stale);
        equal("TruncatedDataException", stale, "reading a range of a segment the truncation deleted");
    }

    /** Lists the ranges, reads them all, and requires exactly {@code expected} (in any order across segments). */
    private static void observeRead(Ctx ctx, String what, BatchClientFactory batch, StreamSegmentsIterator segments,
                                    List<String> expected) {
        List<SegmentRange> ranges = ranges(segments);
        List<String> read = readAll(batch, ranges);
        ctx.observe(what + ": ranges", ranges.size());
        ctx.observe(what + ": events", read.size());
        equal(sorted(expected), sorted(read), what + ": events read");
    }

    private static List<SegmentRange> ranges(StreamSegmentsIterator segments) {
        List<SegmentRange> ranges = new ArrayList<>();
        segments.getIterator().forEachRemaining(ranges::add);
        return ranges;
    }

    private static List<String> readAll(BatchClientFactory batch, List<SegmentRange> ranges) {
        List<String> events = new ArrayList<>();
        for (SegmentRange range : ranges) {
            try (SegmentIterator<String> iterator = batch.readSegment(range, SERIALIZER)) {
                iterator.forEachRemaining(events::add);
            }
        }
        return events;
    }

    /** Writes EVENTS_PER_PHASE events, routed over many keys so every segment gets some, and flushes. */
    private static List<String> write(EventStreamWriter<String> writer, String phase) {
        List<String> events = new ArrayList<>();
        for (int i = 0; i < EVENTS_PER_PHASE; i++) {
            String event = phase + "-" + i;
            writer.writeEvent("key" + i, event);
            events.add(event);
        }
        writer.flush();
        return events;
    }

    private static StreamCut tail(Ctx ctx, String scope, String stream) throws Exception {
        return ctx.streamManager().fetchStreamInfo(scope, stream).get(30, TimeUnit.SECONDS).getTailStreamCut();
    }

    private static EventStreamWriter<String> writer(Ctx ctx, String scope, String stream) {
        return ctx.closeLater(ctx.clientFactory(scope).createEventWriter(stream, SERIALIZER,
                EventWriterConfig.builder().build()));
    }

    private static BatchClientFactory batch(Ctx ctx, String scope) {
        return ctx.closeLater(BatchClientFactory.withScope(scope, ctx.clientConfig()));
    }

    @SafeVarargs
    private static List<String> concat(List<String>... parts) {
        List<String> all = new ArrayList<>();
        for (List<String> part : parts) {
            all.addAll(part);
        }
        return all;
    }

    private static List<String> sorted(List<String> events) {
        List<String> copy = new ArrayList<>(events);
        Collections.sort(copy);
        return copy;
    }

    /** Manual scales through the controller client, as Pravega's BatchClientTest does. */
    private static final class Scaler {
        private final ScheduledExecutorService executor;
        private final ControllerImpl controller;

        Scaler(Ctx ctx) {
            executor = ExecutorServiceHelpers.newScheduledThreadPool(1, "batch-scale");
            ctx.closeLater(executor::shutdownNow);
            controller = ctx.closeLater(new ControllerImpl(
                    ControllerImplConfig.builder().clientConfig(ctx.clientConfig()).build(), executor));
        }

        /** Seals every current segment and replaces them with the ranges between consecutive bounds. */
        void replaceAll(Stream stream, double... bounds) throws Exception {
            List<Long> sealed = new ArrayList<>();
            for (Segment segment : controller.getCurrentSegments(stream.getScope(), stream.getStreamName())
                    .get(30, TimeUnit.SECONDS).getSegments()) {
                sealed.add(segment.getSegmentId());
            }
            Map<Double, Double> ranges = new LinkedHashMap<>();
            for (int i = 0; i + 1 < bounds.length; i++) {
                ranges.put(bounds[i], bounds[i + 1]);
            }
            boolean scaled = controller.scaleStream(stream, sealed, ranges, executor).getFuture().get(60, TimeUnit.SECONDS);
            require(scaled, "scaleStream of " + sealed + " into " + ranges + " answered false");
        }
    }
}
