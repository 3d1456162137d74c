package io.pgcontroller.conformance;

import io.pgcontroller.conformance.EventSupport.Keyed;
import io.pravega.client.admin.ReaderGroupManager;
import io.pravega.client.control.impl.ControllerImpl;
import io.pravega.client.stream.Checkpoint;
import io.pravega.client.stream.EventRead;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.Position;
import io.pravega.client.stream.ReaderGroup;
import io.pravega.client.stream.ReaderGroupConfig;
import io.pravega.client.stream.ReaderGroupConfig.StreamDataRetention;
import io.pravega.client.stream.RetentionPolicy;
import io.pravega.client.stream.ScalingPolicy;
import io.pravega.client.stream.Stream;
import io.pravega.client.stream.StreamConfiguration;
import io.pravega.client.stream.StreamCut;
import io.pravega.client.stream.impl.PositionImpl;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;
import static io.pgcontroller.conformance.EventSupport.READ_TIMEOUT_MS;
import static io.pgcontroller.conformance.EventSupport.READ_WITHIN;
import static io.pgcontroller.conformance.EventSupport.fromHead;
import static io.pgcontroller.conformance.EventSupport.perKeyOrderKept;
import static io.pgcontroller.conformance.EventSupport.readEachOnce;
import static io.pgcontroller.conformance.EventSupport.readExactly;
import static io.pgcontroller.conformance.EventSupport.readToEnd;
import static io.pgcontroller.conformance.EventSupport.requireExactlyOnce;
import static io.pgcontroller.conformance.EventSupport.write;
import static io.pgcontroller.conformance.EventSupport.writer;
import static io.pgcontroller.conformance.ReaderGroupSupport.events;
import static io.pgcontroller.conformance.ReaderGroupSupport.newGroup;
import static io.pgcontroller.conformance.ReaderGroupSupport.reader;
import static io.pgcontroller.conformance.StreamManagerSupport.head;
import static io.pgcontroller.conformance.StreamManagerSupport.tail;

/**
 * Reader groups and their readers: ReaderGroupManager's create/get/delete, bounded reads between
 * stream cuts, checkpoints, reset, unread bytes, stream cuts, a reader going offline at a
 * position, readers sharing segments, reading across a scale and to the end of a sealed stream,
 * and the subscriber stream cuts of retention by consumption (automatic and manual release).
 */
public class ReaderGroupChecks {

    @Check
    public void createReaderGroupTwiceAndWithAnotherConfig(Ctx ctx) {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        ReaderGroupManager manager = ctx.readerGroupManager(scope);
        String name = ctx.unique("rg");
        ReaderGroupConfig config = fromHead(Stream.of(scope, stream));
        ctx.observe("first create", manager.createReaderGroup(name, config));
        // The controller answers the stored config; generation 0 means "never updated", and the
        // client then answers true again (it only says false for a group updated since).
        ctx.observe("second create, same config", manager.createReaderGroup(name, config));
        ReaderGroupConfig other = config.toBuilder().automaticCheckpointIntervalMillis(5_000).build();
        ctx.observe("create with another config", Ctx.thrown(() -> manager.createReaderGroup(name, other)));
        ReaderGroup group = ctx.closeLater(manager.getReaderGroup(name));
        ctx.observe("its streams", group.getStreamNames().equals(Set.of(scope + "/" + stream)));
    }

    @Check
    public void getAndDeleteOfAMissingReaderGroup(Ctx ctx) {
        String scope = ctx.newScope();
        ReaderGroupManager manager = ctx.readerGroupManager(scope);
        String missing = ctx.unique("absent");
        ctx.observe("getReaderGroup", Ctx.thrown(() -> manager.getReaderGroup(missing).close()));
        ctx.observe("deleteReaderGroup", Ctx.thrown(() -> manager.deleteReaderGroup(missing)));
    }

    @Check
    public void deletedReaderGroupIsGoneAndItsNameFree(Ctx ctx) {
        String scope = ctx.newScope();
        Stream stream = Stream.of(scope, ctx.newStream(scope, 1));
        ReaderGroupManager manager = ctx.readerGroupManager(scope);
        String name = ctx.unique("rg");
        EventSupport.createGroup(manager, name, fromHead(stream));
        ctx.observe("delete", Ctx.thrown(() -> manager.deleteReaderGroup(name)));
        ctx.observe("getReaderGroup after delete", Ctx.thrown(() -> manager.getReaderGroup(name).close()));
        ctx.observe("create again", manager.createReaderGroup(name, fromHead(stream)));
    }

    @Check
    public void boundedReadReturnsExactlyTheEventsBetweenTheCuts(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(3);
        EventStreamWriter<String> writer = writer(ctx, target);
        write(writer, events(0, 10));
        StreamCut start = tail(ctx, target);
        write(writer, events(10, 20));
        StreamCut end = tail(ctx, target);
        write(writer, events(20, 30));
        ReaderGroup group = newGroup(ctx, target, ReaderGroupConfig.builder().stream(target.stream(), start, end)
                .disableAutomaticCheckpoints().build());
        EventStreamReader<String> reader = reader(ctx, target, "r1", group);
        readEachOnce(reader, events(10, 20), "events between the cuts");
        // Past the ending cut the reader answers empty reads; 0.13's reader does not report the
        // end as completed (a segment reader at its end offset never becomes ready to read).
        EventRead<String> after = reader.readNextEvent(READ_TIMEOUT_MS);
        ctx.observe("after the end: event", after.getEvent());
        ctx.observe("after the end: read completed", after.isReadCompleted());
    }

    @Check
    public void automaticReleaseRecordsTheLastCheckpointAsTheSubscriberCut(Ctx ctx) throws Exception {
        // Retention by consumption truncates only in the retention cycle (30 min in both servers),
        // so this checks what the controller records at once: the subscriber's stream cut, which
        // then refuses a cut before it (STREAM_CUT_NOT_VALID).
        ScopedStream target = ctx.newScopedStream(consumptionRetention(2));
        write(writer(ctx, target), events(0, 20));
        ReaderGroup group = newGroup(ctx, target, fromHead(target.stream()).toBuilder()
                .retentionType(StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT).build());
        ControllerImpl controller = ControllerSupport.controller(ctx);
        ctx.observe("subscribed", subscribed(controller, target, group));
        StreamCut head = head(ctx, target);
        ctx.observe("head cut before a checkpoint", subscriberUpdate(controller, target, group, head));

        EventStreamReader<String> reader = reader(ctx, target, "r1", group);
        readEachOnce(reader, events(0, 20), "events before the checkpoint");
        Checkpoint checkpoint = checkpoint(ctx, group, reader, "cp1");
        StreamCut checkpointCut = checkpoint.asImpl().getPositions().get(target.stream());
        equal(tail(ctx, target), checkpointCut, "checkpoint cut after reading everything");
        // The reader publishes the cut in the background after it completed the checkpoint.
        Ctx.eventually(Duration.ofSeconds(30), "the head cut is refused after the checkpoint",
                () -> !subscriberUpdate(controller, target, group, head).equals("accepted"));
        ctx.observe("head cut after the checkpoint", subscriberUpdate(controller, target, group, head));
        ctx.observe("checkpoint cut after the checkpoint", subscriberUpdate(controller, target, group, checkpointCut));
    }

    @Check
    public void manualReleaseTakesOnlyForwardRetentionCuts(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(consumptionRetention(2));
        EventStreamWriter<String> writer = writer(ctx, target);
        StreamCut head = head(ctx, target);
        write(writer, events(0, 10));
        StreamCut middle = tail(ctx, target);
        write(writer, events(10, 20));
        StreamCut end = tail(ctx, target);
        ReaderGroup group = newGroup(ctx, target, fromHead(target.stream()).toBuilder()
                .retentionType(StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT).build());
        Stream key = target.stream();
        ControllerImpl controller = ControllerSupport.controller(ctx);
        ctx.observe("subscribed", subscribed(controller, target, group));
        ctx.observe("middle", Ctx.thrown(() -> group.updateRetentionStreamCut(Map.of(key, middle))));
        ctx.observe("back to the head", Ctx.thrown(() -> group.updateRetentionStreamCut(Map.of(key, head))));
        ctx.observe("the same again", Ctx.thrown(() -> group.updateRetentionStreamCut(Map.of(key, middle))));
        ctx.observe("end", Ctx.thrown(() -> group.updateRetentionStreamCut(Map.of(key, end))));
        ctx.observe("back to the middle", Ctx.thrown(() -> group.updateRetentionStreamCut(Map.of(key, middle))));
    }

    @Check
    public void initiateCheckpointCompletesAtTheReaderPosition(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(2);
        EventStreamWriter<String> writer = writer(ctx, target);
        write(writer, events(0, 20));
        ReaderGroup group = newGroup(ctx, target, fromHead(target.stream()));
        EventStreamReader<String> reader = reader(ctx, target, "r1", group);
        readEachOnce(reader, events(0, 20), "events before the checkpoint");

        CompletableFuture<Checkpoint> pending = group.initiateCheckpoint("cp1", ctx.executor());
        EventRead<String> marker = nextCheckpointEvent(reader);
        ctx.observe("checkpoint event name", marker.getCheckpointName());
        ctx.observe("checkpoint event carries an event", marker.getEvent() != null);
        Checkpoint checkpoint = completeWhileReading(pending, reader, "the checkpoint");
        ctx.observe("checkpoint name", checkpoint.getName());
        StreamCut cut = checkpoint.asImpl().getPositions().get(target.stream());
        ctx.observe("checkpoint cut is the reader's position", ownedOffsets(marker.getPosition()).equals(cut.asImpl().getPositions()));
        ctx.observe("checkpoint cut is the tail", cut.equals(tail(ctx, target)));

        // A group started from the checkpoint reads exactly what was written after it.
        write(writer, events(20, 30));
        ReaderGroup fromCheckpoint = newGroup(ctx, target, ReaderGroupConfig.builder().startFromCheckpoint(checkpoint)
                .disableAutomaticCheckpoints().build());
        EventStreamReader<String> second = reader(ctx, target, "r1", fromCheckpoint);
        readEachOnce(second, events(20, 30), "events after the checkpoint");
        ctx.observe("nothing more after the checkpoint's events", second.readNextEvent(500).getEvent());
    }

    @Check
    public void resetReaderGroupReadsEverythingAgain(Ctx ctx) {
        ScopedStream target = streamHolding(ctx, 2, events(0, 15));
        ReaderGroup group = newGroup(ctx, target, fromHead(target.stream()));
        EventStreamReader<String> first = reader(ctx, target, "r1", group);
        readEachOnce(first, events(0, 15), "first pass");
        first.close();
        group.resetReaderGroup();
        EventStreamReader<String> second = reader(ctx, target, "r2", group);
        readEachOnce(second, events(0, 15), "after resetReaderGroup");
        ctx.observe("more after the second pass", second.readNextEvent(500).getEvent());
        // The reset is an update of the group (generation 1): createReaderGroup now answers false.
        ctx.observe("create after the reset", ctx.readerGroupManager(target.scope())
                .createReaderGroup(group.getGroupName(), fromHead(target.stream())));
    }

    @Check
    public void unreadBytesIsZeroOnceEverythingIsRead(Ctx ctx) throws Exception {
        ScopedStream target = streamHolding(ctx, 2, events(0, 20));
        ReaderGroup group = newGroup(ctx, target, fromHead(target.stream()));
        ctx.observe("unread bytes before reading > 0", group.getMetrics().unreadBytes() > 0);
        EventStreamReader<String> reader = reader(ctx, target, "r1", group);
        readEachOnce(reader, events(0, 20), "events");
        // Unread bytes count from the last completed checkpoint.
        checkpoint(ctx, group, reader, "cp1");
        ctx.observe("unread bytes after reading everything", group.getMetrics().unreadBytes());
    }

    @Check
    public void streamCutsFollowTheReaders(Ctx ctx) throws Exception {
        ScopedStream target = streamHolding(ctx, 2, events(0, 20));
        ReaderGroup group = newGroup(ctx, target, fromHead(target.stream()));
        Stream key = target.stream();
        StreamCut head = head(ctx, target);
        StreamCut end = tail(ctx, target);
        ctx.observe("getStreamCuts before reading is the head", head.equals(group.getStreamCuts().get(key)));
        EventStreamReader<String> reader = reader(ctx, target, "r1", group);
        readEachOnce(reader, events(0, 20), "events");
        // The silent checkpoint completes when the reader reads again.
        Map<Stream, StreamCut> generated = completeWhileReading(group.generateStreamCuts(ctx.executor()), reader,
                "generateStreamCuts");
        ctx.observe("generateStreamCuts after reading everything is the tail", end.equals(generated.get(key)));
        // getStreamCuts holds the offsets at which segments last changed hands; a reader going
        // offline hands them back at its final position.
        reader.close();
        ctx.observe("getStreamCuts after the reader closed is the tail", end.equals(group.getStreamCuts().get(key)));
    }

    @Check
    public void readerOfflineAtAPositionHandsOverWithoutLossOrDuplicate(Ctx ctx) {
        ScopedStream target = streamHolding(ctx, 2, events(0, 30));
        ReaderGroup group = newGroup(ctx, target, fromHead(target.stream()));
        EventStreamReader<String> first = reader(ctx, target, "r1", group);
        List<String> read = new ArrayList<>();
        Position position = null;
        while (read.size() < 12) {
            EventRead<String> next = first.readNextEvent(READ_TIMEOUT_MS);
            require(next.getEvent() != null || !next.isReadCompleted(), "end of stream after " + read);
            if (next.getEvent() != null) {
                read.add(next.getEvent());
                position = next.getPosition();
            }
        }
        // r1 is neither closed nor read again: the group hands its segments over at that position.
        group.readerOffline("r1", position);
        ctx.observe("online after readerOffline", group.getOnlineReaders().contains("r1"));
        EventStreamReader<String> second = reader(ctx, target, "r2", group);
        read.addAll(readExactly(second, 30 - read.size(), READ_WITHIN));
        requireExactlyOnce(events(0, 30), read, "events of both readers");
        ctx.observe("more for the second reader", second.readNextEvent(500).getEvent());
    }

    @Check
    public void twoReadersShareFourSegmentsAndReadEachEventOnce(Ctx ctx) {
        ScopedStream target = streamHolding(ctx, 4, events(0, 40));
        ReaderGroup group = newGroup(ctx, target, fromHead(target.stream()));
        // Both join before either reads, so each takes its fair share (two segments) on its first read.
        List<EventStreamReader<String>> readers = List.of(reader(ctx, target, "r1", group), reader(ctx, target, "r2", group));
        List<List<String>> reads = List.of(new ArrayList<>(), new ArrayList<>());
        long deadline = System.nanoTime() + READ_WITHIN.toNanos();
        while (reads.get(0).size() + reads.get(1).size() < 40) {
            require(System.nanoTime() < deadline, "read " + reads + " of 40 events");
            for (int i = 0; i < 2; i++) {
                String event = readers.get(i).readNextEvent(200).getEvent();
                if (event != null) {
                    reads.get(i).add(event);
                }
            }
        }
        List<String> all = new ArrayList<>(reads.get(0));
        all.addAll(reads.get(1));
        requireExactlyOnce(events(0, 40), all, "events of both readers");
        ctx.observe("segments per reader", group.getReaderSegmentDistribution().getReaderSegmentDistribution().values()
                .stream().sorted().toList());
        ctx.observe("both readers read", !reads.get(0).isEmpty() && !reads.get(1).isEmpty());
    }

    @Check
    public void readsAcrossAScaleInKeyOrderToTheEnd(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(1);
        EventStreamWriter<String> writer = writer(ctx, target);
        write(writer, events(0, 20));
        EventStreamReader<String> reader = reader(ctx, target, "r1", newGroup(ctx, target, withCheckpoints(target)));
        List<String> read = new ArrayList<>(readExactly(reader, 5, READ_WITHIN));
        ControllerSupport.scale(ControllerSupport.controller(ctx), ctx.executor(), target.stream(), List.of(0L),
                Map.of(0.0, 0.5, 0.5, 1.0));
        write(writer, events(20, 40));
        read.addAll(readExactly(reader, 35, READ_WITHIN));
        requireExactlyOnce(events(0, 40), read, "events before and after the scale");
        ctx.observe("per-key order kept", perKeyOrderKept(events(0, 40), read));
        // Sealed after a scale, the stream ends where the successors end.
        ctx.observe("seal", ctx.streamManager().sealStream(target.scope(), target.name()));
        ctx.observe("events after the seal", readToEnd(reader, READ_WITHIN));
    }

    @Check
    public void readsThroughASealToTheEndOfTheStream(Ctx ctx) {
        ScopedStream target = streamHolding(ctx, 2, events(0, 20));
        EventStreamReader<String> reader = reader(ctx, target, "r1", newGroup(ctx, target, withCheckpoints(target)));
        List<String> read = new ArrayList<>(readExactly(reader, 8, READ_WITHIN));
        ctx.observe("seal", ctx.streamManager().sealStream(target.scope(), target.name()));
        read.addAll(readToEnd(reader, READ_WITHIN));
        requireExactlyOnce(events(0, 20), read, "events of the sealed stream");
        // Automatic checkpoints go on after the end; the next read that is not one says "completed" again.
        EventRead<String> after = reader.readNextEvent(500);
        while (after.isCheckpoint()) {
            after = reader.readNextEvent(500);
        }
        ctx.observe("after the end: event", after.getEvent());
        ctx.observe("after the end: read completed", after.isReadCompleted());
    }

    /** A new stream of {@code segments} fixed segments that holds {@code events} (written and flushed). */
    private static ScopedStream streamHolding(Ctx ctx, int segments, List<Keyed> events) {
        ScopedStream target = ctx.newScopedStream(segments);
        write(writer(ctx, target), events);
        return target;
    }

    /**
     * A group from the head with an automatic checkpoint every second: a 0.13 reader gives up a
     * segment it read to its end (and learns its successors, or the end of the stream) only
     * right after a checkpoint.
     */
    private static ReaderGroupConfig withCheckpoints(ScopedStream target) {
        return ReaderGroupConfig.builder().stream(target.stream()).automaticCheckpointIntervalMillis(1_000).build();
    }

    private static StreamConfiguration consumptionRetention(int segments) {
        return StreamConfiguration.builder().scalingPolicy(ScalingPolicy.fixed(segments))
                .retentionPolicy(RetentionPolicy.bySizeBytes(1, 1L << 30)).build();
    }

    /** Whether the controller lists the group among the stream's subscribers. */
    private static boolean subscribed(ControllerImpl controller, ScopedStream target, ReaderGroup group) {
        return controller.listSubscribers(target.scope(), target.name()).join()
                .contains(target.scope() + "/" + group.getGroupName());
    }

    /** What the controller answers to a subscriber cut for the group: "accepted" or the client's error. */
    private static String subscriberUpdate(ControllerImpl controller, ScopedStream target, ReaderGroup group,
                                           StreamCut cut) {
        ReaderGroupConfig config = controller.getReaderGroupConfig(target.scope(), group.getGroupName()).join();
        try {
            controller.updateSubscriberStreamCut(target.scope(), target.name(), target.scope() + "/" + group.getGroupName(),
                    config.getReaderGroupId(), config.getGeneration(), cut).join();
            return "accepted";
        } catch (RuntimeException e) {
            // The client turns each refusal status into an exception whose message names it.
            Throwable cause = e.getCause() == null ? e : e.getCause();
            String message = String.valueOf(cause.getMessage());
            for (String status : new String[] {"StreamCut not valid", "Subscriber does not exist",
                    "Invalid generation", "Stream does not exist"}) {
                if (message.startsWith(status)) {
                    return cause.getClass().getSimpleName() + ": " + status;
                }
            }
            return cause.getClass().getSimpleName();
        }
    }

    /** Reads until the checkpoint event (the reader has read everything before). */
    private static EventRead<String> nextCheckpointEvent(EventStreamReader<String> reader) {
        long deadline = System.nanoTime() + READ_WITHIN.toNanos();
        while (true) {
            require(System.nanoTime() < deadline, "no checkpoint event");
            EventRead<String> next = reader.readNextEvent(READ_TIMEOUT_MS);
            require(next.getEvent() == null, "an event after the last one: " + next.getEvent());
            if (next.isCheckpoint()) {
                return next;
            }
        }
    }

    /**
     * What a checkpoint (or the silent one of generateStreamCuts) completes with: it completes when
     * its reader reads again after the checkpoint event, and the reader has read everything before.
     */
    private static <T> T completeWhileReading(CompletableFuture<T> pending, EventStreamReader<String> reader,
                                              String what) throws Exception {
        long deadline = System.nanoTime() + READ_WITHIN.toNanos();
        while (!pending.isDone()) {
            require(System.nanoTime() < deadline, what + " did not complete");
            require(reader.readNextEvent(200).getEvent() == null, "an event after the last one");
        }
        return pending.get();
    }

    /** Initiates a checkpoint and reads on until it completes. */
    private static Checkpoint checkpoint(Ctx ctx, ReaderGroup group, EventStreamReader<String> reader, String name)
            throws Exception {
        CompletableFuture<Checkpoint> pending = group.initiateCheckpoint(name, ctx.executor());
        nextCheckpointEvent(reader);
        return completeWhileReading(pending, reader, "the checkpoint");
    }

    private static Map<?, Long> ownedOffsets(Position position) {
        return ((PositionImpl) position.asImpl()).getOwnedSegmentsWithOffsets();
    }
}
