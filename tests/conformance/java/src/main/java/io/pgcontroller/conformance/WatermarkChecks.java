package io.pgcontroller.conformance;

import io.pravega.client.SynchronizerClientFactory;
import io.pravega.client.control.impl.ControllerImpl;
import io.pravega.client.segment.impl.Segment;
import io.pravega.client.state.Revision;
import io.pravega.client.state.RevisionedStreamClient;
import io.pravega.client.state.SynchronizerConfig;
import io.pravega.client.stream.EventRead;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.ReaderGroup;
import io.pravega.client.stream.ReaderGroupConfig;
import io.pravega.client.stream.Stream;
import io.pravega.client.stream.StreamCut;
import io.pravega.client.stream.TimeWindow;
import io.pravega.client.stream.impl.StreamCutImpl;
import io.pravega.client.stream.impl.WriterPosition;
import io.pravega.client.watermark.WatermarkSerializer;
import io.pravega.shared.NameUtils;
import io.pravega.shared.watermarks.Watermark;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Collectors;

import static io.pgcontroller.conformance.Ctx.require;
import static io.pgcontroller.conformance.EventSupport.requireExactlyOnce;
import static io.pgcontroller.conformance.EventSupport.write;
import static io.pgcontroller.conformance.EventSupport.writer;
import static io.pgcontroller.conformance.ReaderGroupSupport.events;
import static io.pgcontroller.conformance.ReaderGroupSupport.index;
import static io.pgcontroller.conformance.StreamManagerSupport.tail;

/**
 * Watermarks: writers noting time (noteTime, automaticallyNoteTime), the controller's answers to
 * writer marks, the watermarks it appends to {@code _MARK<stream>} (read with a revisioned stream
 * client, as Pravega's WatermarkingTest does), and a reader bounded by two watermarks' cuts whose
 * time window holds its events' times, across a scale. Both servers compute watermarks every 10 s
 * (Pravega's default; serve's --watermark-period-ms), so the checks wait up to 90 s for each.
 */
public class WatermarkChecks {
    private static final Duration MARK_WITHIN = Duration.ofSeconds(90);

    @Check(timeoutSeconds = 240) // two watermark periods or more
    public void noteTimeYieldsWatermarksOfTheNotedTimesAtTheWriterPosition(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(2);
        EventStreamWriter<String> writer = writer(ctx, target);
        RevisionedStreamClient<Watermark> marks = markClient(ctx, target);
        write(writer, events(0, 10));
        writer.noteTime(1_000);
        Watermark first = awaitMarks(marks, 1).get(0);
        ctx.observe("first", bounds(first));
        ctx.observe("first cut is the writer's position", offsets(first).equals(offsets(tail(ctx, target))));

        // A time older than the writer's last is refused by the controller: no watermark for it.
        writer.noteTime(500);
        write(writer, events(10, 20));
        writer.noteTime(2_000);
        List<Watermark> all = awaitMarks(marks, 2);
        ctx.observe("all", all.stream().map(WatermarkChecks::bounds).toList());
        ctx.observe("second cut is the writer's position", offsets(all.get(1)).equals(offsets(tail(ctx, target))));
    }

    @Check(timeoutSeconds = 180) // the writer notes every 5 s, the controller computes every 10 s
    public void automaticallyNotedTimeYieldsAWatermarkOfTheWriterClock(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(1);
        EventStreamWriter<String> writer = ctx.closeLater(target.factory().createEventWriter(target.name(),
                EventSupport.STRINGS, EventWriterConfig.builder().automaticallyNoteTime(true).build()));
        RevisionedStreamClient<Watermark> marks = markClient(ctx, target);
        long before = System.currentTimeMillis();
        write(writer, events(0, 5));
        ctx.observe("noteTime on an automatic writer", Ctx.thrown(() -> writer.noteTime(before)));
        Watermark first = awaitMarks(marks, 1).get(0);
        long after = System.currentTimeMillis();
        ctx.observe("bounds within the writer's clock", before <= first.getLowerTimeBound()
                && first.getLowerTimeBound() <= first.getUpperTimeBound() && first.getUpperTimeBound() <= after);
    }

    @Check
    public void writerMarksMustAdvanceInTimeAndPosition(Ctx ctx) {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        ControllerImpl controller = ControllerSupport.controller(ctx);
        Stream key = Stream.of(scope, stream);
        String writer = "w1";
        ctx.observe("first", noteAnswer(controller, writer, key, 100, 10));
        ctx.observe("same time and position", noteAnswer(controller, writer, key, 100, 10));
        ctx.observe("older time", noteAnswer(controller, writer, key, 50, 20));
        ctx.observe("earlier position", noteAnswer(controller, writer, key, 200, 5));
        ctx.observe("later time and position", noteAnswer(controller, writer, key, 300, 30));
        ctx.observe("removeWriter", Ctx.thrown(() -> controller.removeWriter(writer, key).join()));
        ctx.observe("after removal, an older time", noteAnswer(controller, writer, key, 50, 0));
        ctx.observe("removeWriter again", Ctx.thrown(() -> controller.removeWriter(writer, key).join()));
        ctx.observe("removeWriter of an unknown writer", Ctx.thrown(() -> controller.removeWriter("w2", key).join()));
    }

    @Check(timeoutSeconds = 300) // two watermarks, a scale between them, then a bounded read
    public void readerBetweenTwoWatermarksAcrossAScaleSeesTimesInItsWindow(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(1);
        EventStreamWriter<String> writer = writer(ctx, target);
        RevisionedStreamClient<Watermark> marks = markClient(ctx, target);
        // Event e<i> is written at time i.
        write(writer, events(1, 11));
        writer.noteTime(10);
        Watermark before = awaitMarks(marks, 1).get(0);
        ControllerSupport.scale(ControllerSupport.controller(ctx), ctx.executor(), target.stream(), List.of(0L),
                Map.of(0.0, 0.5, 0.5, 1.0));
        write(writer, events(11, 21));
        writer.noteTime(20);
        Watermark after = awaitMarks(marks, 2).get(1);
        ctx.observe("watermarks", List.of(bounds(before), bounds(after)));
        ctx.observe("segments of the second cut", after.getStreamCut().size());

        // Automatic checkpoints let the reader move from the sealed segment to its successors.
        ReaderGroup group = ReaderGroupSupport.newGroup(ctx, target, ReaderGroupConfig.builder()
                .stream(target.stream(), cut(target, before), cut(target, after))
                .automaticCheckpointIntervalMillis(1_000).build());
        EventStreamReader<String> reader = ReaderGroupSupport.reader(ctx, target, "r1", group);
        List<String> read = new ArrayList<>();
        boolean allInWindow = true;
        boolean upperBoundSeen = false;
        long deadline = System.nanoTime() + MARK_WITHIN.toNanos();
        while (read.size() < 10) {
            require(System.nanoTime() < deadline, "read " + read);
            EventRead<String> next = reader.readNextEvent(EventSupport.READ_TIMEOUT_MS);
            if (next.getEvent() == null) {
                continue;
            }
            read.add(next.getEvent());
            TimeWindow window = reader.getCurrentTimeWindow(target.stream());
            long time = index(next.getEvent());
            allInWindow &= (window.getLowerTimeBound() == null || window.getLowerTimeBound() <= time)
                    && (window.getUpperTimeBound() == null || time <= window.getUpperTimeBound());
            upperBoundSeen |= window.getUpperTimeBound() != null;
        }
        requireExactlyOnce(events(11, 21), read, "events between the two watermarks");
        ctx.observe("every event within its time window", allInWindow);
        ctx.observe("an upper bound was known", upperBoundSeen);
        ctx.observe("nothing past the second watermark", nextEvent(reader));
    }

    private static RevisionedStreamClient<Watermark> markClient(Ctx ctx, ScopedStream target) {
        SynchronizerClientFactory factory = ctx.closeLater(SynchronizerClientFactory.withScope(target.scope(),
                ctx.clientConfig()));
        return ctx.closeLater(factory.createRevisionedStreamClient(NameUtils.getMarkStreamForStream(target.name()),
                new WatermarkSerializer(), SynchronizerConfig.builder().build()));
    }

    /** Every watermark of the mark stream, oldest first, once there are at least {@code count}. */
    private static List<Watermark> awaitMarks(RevisionedStreamClient<Watermark> marks, int count) throws Exception {
        List<Watermark> found = new ArrayList<>();
        Ctx.eventually(MARK_WITHIN, count + " watermark(s)", () -> {
            found.clear();
            Iterator<Map.Entry<Revision, Watermark>> entries = marks.readFrom(marks.fetchOldestRevision());
            entries.forEachRemaining(entry -> found.add(entry.getValue()));
            return found.size() >= count;
        });
        return found;
    }

    private static String bounds(Watermark mark) {
        return mark.getLowerTimeBound() + ".." + mark.getUpperTimeBound();
    }

    private static Map<Long, Long> offsets(Watermark mark) {
        return new TreeMap<>(mark.getStreamCut().entrySet().stream()
                .collect(Collectors.toMap(entry -> entry.getKey().getSegmentId(), Map.Entry::getValue)));
    }

    private static Map<Long, Long> offsets(StreamCut cut) {
        return new TreeMap<>(cut.asImpl().getPositions().entrySet().stream()
                .collect(Collectors.toMap(entry -> entry.getKey().getSegmentId(), Map.Entry::getValue)));
    }

    private static StreamCut cut(ScopedStream target, Watermark mark) {
        return new StreamCutImpl(target.stream(), mark.getStreamCut().entrySet().stream()
                .collect(Collectors.toMap(entry -> new Segment(target.scope(), target.name(),
                        entry.getKey().getSegmentId()), Map.Entry::getValue)));
    }

    /** The controller's answer to a mark of segment 0 at {@code offset}: "none" or the refusal's status. */
    private static String noteAnswer(ControllerImpl controller, String writer, Stream stream, long time, long offset) {
        WriterPosition position = new WriterPosition(Map.of(new Segment(stream.getScope(), stream.getStreamName(), 0L), offset));
        try {
            controller.noteTimestampFromWriter(writer, stream, time, position).join();
            return "none";
        } catch (RuntimeException e) {
            // The client's message ends with the status: "failed to note time because: INVALID_TIME".
            Throwable cause = e.getCause() == null ? e : e.getCause();
            String message = String.valueOf(cause.getMessage());
            return cause.getClass().getSimpleName() + ": " + message.substring(message.lastIndexOf(' ') + 1);
        }
    }

    private static String nextEvent(EventStreamReader<String> reader) {
        EventRead<String> next = reader.readNextEvent(1_000);
        while (next.isCheckpoint()) {
            next = reader.readNextEvent(1_000);
        }
        return next.getEvent();
    }
}
