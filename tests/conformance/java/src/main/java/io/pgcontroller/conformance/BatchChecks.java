package io.pgcontroller.conformance;

import io.pravega.client.BatchClientFactory;
import io.pravega.client.batch.SegmentIterator;
import io.pravega.client.batch.SegmentRange;
import io.pravega.client.batch.StreamSegmentsIterator;
import io.pravega.client.control.impl.ControllerImpl;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.StreamCut;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ScheduledExecutorService;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;

/**
 * BatchClientFactory: getSegments between stream cuts (unbounded, null and real cuts from
 * fetchStreamInfo) and readSegment of every range, on a fixed stream, across two scales (each
 * epoch's events read exactly once), and after truncations (events before the cut are gone, a
 * range listed before the truncation cannot be read).
 */
public class BatchChecks {
    private static final int EVENTS_PER_PHASE = 30;

    @Check
    public void getSegmentsBetweenCutsReadsEachPhaseExactly(Ctx ctx) throws Exception {
        BatchedStream batched = new BatchedStream(ctx, 3);
        List<String> first = batched.write("a");
        StreamCut afterFirst = batched.tail();
        List<String> second = batched.write("b");
        StreamCut afterSecond = batched.tail();
        List<String> third = batched.write("c");

        batched.observeRead("unbounded", StreamCut.UNBOUNDED, StreamCut.UNBOUNDED, concat(first, second, third));
        batched.observeRead("null cuts", null, null, concat(first, second, third));
        batched.observeRead("to the first cut", StreamCut.UNBOUNDED, afterFirst, first);
        StreamSegmentsIterator between = batched.segments(afterFirst, afterSecond);
        ctx.observe("between cuts: start cut echoed", afterFirst.equals(between.getStartStreamCut()));
        ctx.observe("between cuts: end cut echoed", afterSecond.equals(between.getEndStreamCut()));
        batched.observeRead("between cuts", between, second);
        batched.observeRead("from the second cut", afterSecond, StreamCut.UNBOUNDED, third);
    }

    @Check
    public void getSegmentsAcrossScalesReadsEveryEpochOnce(Ctx ctx) throws Exception {
        BatchedStream batched = new BatchedStream(ctx, 1);
        List<String> epoch0 = batched.write("e0");
        StreamCut inEpoch0 = batched.tail();
        batched.replaceAllSegments(0.0, 0.4, 0.7, 1.0);
        List<String> epoch1 = batched.write("e1");
        StreamCut inEpoch1 = batched.tail();
        batched.replaceAllSegments(0.0, 0.5, 1.0);
        List<String> epoch2 = batched.write("e2");

        batched.observeRead("whole stream", StreamCut.UNBOUNDED, StreamCut.UNBOUNDED, concat(epoch0, epoch1, epoch2));
        batched.observeRead("epoch 0 only", StreamCut.UNBOUNDED, inEpoch0, epoch0);
        batched.observeRead("epoch 1 only", inEpoch0, inEpoch1, epoch1);
        batched.observeRead("from epoch 1", inEpoch1, StreamCut.UNBOUNDED, epoch2);
        batched.observeRead("from epoch 0 to the tail", inEpoch0, StreamCut.UNBOUNDED, concat(epoch1, epoch2));
    }

    @Check
    public void getSegmentsAfterTruncationLeavesOutEarlierEvents(Ctx ctx) throws Exception {
        BatchedStream batched = new BatchedStream(ctx, 2);
        List<String> before = batched.write("old");
        StreamCut cut = batched.tail();
        List<String> after = batched.write("new");
        List<SegmentRange> listedBefore = batched.ranges(StreamCut.UNBOUNDED, StreamCut.UNBOUNDED);
        require(!before.isEmpty(), "events before the cut");

        batched.truncate(cut);
        ctx.observe("head cut = truncation cut", cut.equals(StreamManagerSupport.head(ctx, batched.target)));
        batched.observeRead("after truncation", StreamCut.UNBOUNDED, StreamCut.UNBOUNDED, after);
        batched.observeRead("after truncation, null cuts", null, null, after);
        batched.observeTruncated("reading a range listed before the truncation", listedBefore);
    }

    @Check
    public void truncationAfterScaleDropsTheEarlierEpochs(Ctx ctx) throws Exception {
        BatchedStream batched = new BatchedStream(ctx, 1);
        batched.write("e0");
        List<SegmentRange> epoch0Ranges = batched.ranges(StreamCut.UNBOUNDED, StreamCut.UNBOUNDED);
        batched.replaceAllSegments(0.0, 0.4, 0.7, 1.0);
        batched.write("e1a");
        StreamCut inEpoch1 = batched.tail();
        List<String> afterTheCut = batched.write("e1b");
        batched.replaceAllSegments(0.0, 0.5, 1.0);
        List<String> later = concat(afterTheCut, batched.write("e2"));

        batched.truncate(inEpoch1);
        batched.observeRead("after truncation", StreamCut.UNBOUNDED, StreamCut.UNBOUNDED, later);
        batched.observeTruncated("reading an epoch-0 range listed before the truncation", epoch0Ranges);
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

    /**
     * A check's stream, its writer and a batch client of its scope, and what the checks do with
     * them: write a phase of events, take the tail cut, scale and truncate, and read ranges.
     */
    private static final class BatchedStream {
        private final Ctx ctx;
        private final ScopedStream target;
        private final EventStreamWriter<String> writer;
        private final BatchClientFactory batch;
        /** Made by the first scale: the checks that do not scale need no controller client. */
        private ControllerImpl controller;
        private ScheduledExecutorService executor;

        BatchedStream(Ctx ctx, int segments) {
            this.ctx = ctx;
            this.target = ctx.newScopedStream(segments);
            this.writer = EventSupport.writer(ctx, target);
            this.batch = ctx.closeLater(BatchClientFactory.withScope(target.scope(), ctx.clientConfig()));
        }

        /** Writes EVENTS_PER_PHASE events, routed over many keys so every segment gets some, and flushes. */
        List<String> write(String phase) {
            return EventSupport.write(writer, EventSupport.numberedEvents(phase + "-", 0, EVENTS_PER_PHASE, i -> "key" + i));
        }

        StreamCut tail() throws Exception {
            return StreamManagerSupport.tail(ctx, target);
        }

        /** Manual scales through the controller client, as Pravega's BatchClientTest does. */
        void replaceAllSegments(double... bounds) throws Exception {
            if (controller == null) {
                executor = ctx.executor();
                controller = ControllerSupport.controller(ctx);
            }
            ControllerSupport.replaceAllSegments(controller, executor, target.stream(), bounds);
        }

        void truncate(StreamCut cut) {
            require(ctx.streamManager().truncateStream(target.scope(), target.name(), cut), "truncateStream answered false");
        }

        StreamSegmentsIterator segments(StreamCut start, StreamCut end) {
            return batch.getSegments(target.stream(), start, end);
        }

        List<SegmentRange> ranges(StreamCut start, StreamCut end) {
            return ranges(segments(start, end));
        }

        private static List<SegmentRange> ranges(StreamSegmentsIterator segments) {
            List<SegmentRange> ranges = new ArrayList<>();
            segments.getIterator().forEachRemaining(ranges::add);
            return ranges;
        }

        /** Lists the ranges, reads them all, and requires exactly {@code expected} (in any order across segments). */
        void observeRead(String what, StreamCut start, StreamCut end, List<String> expected) {
            observeRead(what, segments(start, end), expected);
        }

        void observeRead(String what, StreamSegmentsIterator segments, List<String> expected) {
            List<SegmentRange> ranges = ranges(segments);
            List<String> read = readAll(ranges);
            ctx.observe(what + ": ranges", ranges.size());
            ctx.observe(what + ": events", read.size());
            equal(sorted(expected), sorted(read), what + ": events read");
        }

        /** Records what reading {@code ranges} throws, and requires TruncatedDataException: they lie before the head. */
        void observeTruncated(String what, List<SegmentRange> ranges) {
            String stale = Ctx.thrown(() -> readAll(ranges));
            ctx.observe(what, stale);
            equal("TruncatedDataException", stale, what);
        }

        private List<String> readAll(List<SegmentRange> ranges) {
            List<String> events = new ArrayList<>();
            for (SegmentRange range : ranges) {
                try (SegmentIterator<String> iterator = batch.readSegment(range, EventSupport.STRINGS)) {
                    iterator.forEachRemaining(events::add);
                }
            }
            return events;
        }
    }
}
