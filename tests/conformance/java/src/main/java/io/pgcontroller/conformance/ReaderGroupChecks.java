package io.pgcontroller.conformance;

import io.pravega.client.EventStreamClientFactory;
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
import java.util.concurrent.ScheduledExecutorService;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;
import static io.pgcontroller.conformance.ReaderGroupSupport.events;
import static io.pgcontroller.conformance.ReaderGroupSupport.fromHead;
import static io.pgcontroller.conformance.ReaderGroupSupport.group;
import static io.pgcontroller.conformance.ReaderGroupSupport.read;
import static io.pgcontroller.conformance.ReaderGroupSupport.readToEnd;
import static io.pgcontroller.conformance.ReaderGroupSupport.reader;
import static io.pgcontroller.conformance.ReaderGroupSupport.requireExactlyOnce;
import static io.pgcontroller.conformance.ReaderGroupSupport.tail;
import static io.pgcontroller.conformance.ReaderGroupSupport.write;
import static io.pgcontroller.conformance.ReaderGroupSupport.writer;

/**
 * Reader groups and their readers: ReaderGroupManager's create/get/delete, bounded reads between
 * stream cuts, checkpoints, reset, unread bytes, stream cuts, a reader going offline at a
 * position, readers sharing segments, reading across a scale and to the end of a sealed stream,
 * and the subscriber stream cuts of retention by consumption (automatic and manual release).
 */
public class ReaderGroupChecks {
    private static final Duration READ_WITHIN = Duration.ofSeconds(60);

    @Check
    public void createReaderGroupTwiceAndWithAnotherConfig(Ctx ctx) {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        ReaderGroupManager manager = ctx.readerGroupManager(scope);
        String name = ctx.unique("rg");
        ReaderGroupConfig config = fromHead(scope, stream);
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
        String stream = ctx.newStream(scope, 1);
        ReaderGroupManager manager = ctx.readerGroupManager(scope);
        String name = ctx.unique("rg");
        require(manager.createReaderGroup(name, fromHead(scope, stream)), "createReaderGroup answered false");
        ctx.observe("delete", Ctx.thrown(() -> manager.deleteReaderGroup(name)));
        ctx.observe("getReaderGroup after delete", Ctx.thrown(() -> manager.getReaderGroup(name).close()));
        ctx.observe("create again", manager.createReaderGroup(name, fromHead(scope, stream)));
    }

    @Check
    public void boundedReadReturnsExactlyTheEventsBetweenTheCuts(Ctx ctx) {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 3);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventStreamWriter<String> writer = writer(ctx, factory, stream);
        write(writer, 0, 10);
        StreamCut start = tail(ctx, scope, stream);
        write(writer, 10, 20);
        StreamCut end = tail(ctx, scope, stream);
        write(writer, 20, 30);
        String name = ctx.unique("rg");
        ReaderGroupConfig config = ReaderGroupConfig.builder().stream(Stream.of(scope, stream), start, end)
                .disableAutomaticCheckpoints().build();
        group(ctx, ctx.readerGroupManager(scope), name, config);
        EventStreamReader<String> reader = reader(ctx, factory, "r1", name);
        requireExactlyOnce(events(10, 20), read(reader, 10, READ_WITHIN), "events between the cuts");
        // Past the ending cut the reader answers empty reads; 0.13's reader does not report the
        // end as completed (a segment reader at its end offset never becomes ready to read).
        EventRead<String> after = reader.readNextEvent(ReaderGroupSupport.READ_TIMEOUT_MS);
        ctx.observe("after the end: event", after.getEvent());
        ctx.observe("after the end: read completed", after.isReadCompleted());
    }

    @Check
    public void automaticReleaseRecordsTheLastCheckpointAsTheSubscriberCut(Ctx ctx) throws Exception {
        // Retention by consumption truncates only in the retention cycle (30 min in both servers),
        // so this checks what the controller records at once: the subscriber's stream cut, which
        // then refuses a cut before it (STREAM_CUT_NOT_VALID).
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, consumptionRetention(2));
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        write(writer(ctx, factory, stream), 0, 20);
        String name = ctx.unique("rg");
        ReaderGroup group = group(ctx, ctx.readerGroupManager(scope), name, fromHead(scope, stream).toBuilder()
                .retentionType(StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT).build());
        ControllerImpl controller = ReaderGroupSupport.controller(ctx);
        ctx.observe("subscribed", controller.listSubscribers(scope, stream).join().contains(scope + "/" + name));
        StreamCut head = ReaderGroupSupport.head(ctx, scope, stream);
        ctx.observe("head cut before a checkpoint", subscriberUpdate(controller, scope, stream, name, head));

        EventStreamReader<String> reader = reader(ctx, factory, "r1", name);
        requireExactlyOnce(events(0, 20), read(reader, 20, READ_WITHIN), "events before the checkpoint");
        Checkpoint checkpoint = checkpoint(group, reader, "cp1", ReaderGroupSupport.executor(ctx));
        StreamCut checkpointCut = checkpoint.asImpl().getPositions().get(Stream.of(scope, stream));
        equal(tail(ctx, scope, stream), checkpointCut, "checkpoint cut after reading everything");
        // The reader publishes the cut in the background after it completed the checkpoint.
        Ctx.eventually(Duration.ofSeconds(30), "the head cut is refused after the checkpoint",
                () -> !subscriberUpdate(controller, scope, stream, name, head).equals("accepted"));
        ctx.observe("head cut after the checkpoint", subscriberUpdate(controller, scope, stream, name, head));
        ctx.observe("checkpoint cut after the checkpoint", subscriberUpdate(controller, scope, stream, name, checkpointCut));
    }

    @Check
    public void manualReleaseTakesOnlyForwardRetentionCuts(Ctx ctx) {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, consumptionRetention(2));
        EventStreamWriter<String> writer = writer(ctx, ctx.clientFactory(scope), stream);
        StreamCut head = ReaderGroupSupport.head(ctx, scope, stream);
        write(writer, 0, 10);
        StreamCut middle = tail(ctx, scope, stream);
        write(writer, 10, 20);
        StreamCut end = tail(ctx, scope, stream);
        String name = ctx.unique("rg");
        ReaderGroup group = group(ctx, ctx.readerGroupManager(scope), name, fromHead(scope, stream).toBuilder()
                .retentionType(StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT).build());
        Stream key = Stream.of(scope, stream);
        ControllerImpl controller = ReaderGroupSupport.controller(ctx);
        ctx.observe("subscribed", controller.listSubscribers(scope, stream).join().contains(scope + "/" + name));
        ctx.observe("middle", Ctx.thrown(() -> group.updateRetentionStreamCut(Map.of(key, middle))));
        ctx.observe("back to the head", Ctx.thrown(() -> group.updateRetentionStreamCut(Map.of(key, head))));
        ctx.observe("the same again", Ctx.thrown(() -> group.updateRetentionStreamCut(Map.of(key, middle))));
        ctx.observe("end", Ctx.thrown(() -> group.updateRetentionStreamCut(Map.of(key, end))));
        ctx.observe("back to the middle", Ctx.thrown(() -> group.updateRetentionStreamCut(Map.of(key, middle))));
    }

    @Check
    public void initiateCheckpointCompletesAtTheReaderPosition(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventStreamWriter<String> writer = writer(ctx, factory, stream);
        write(writer, 0, 20);
        String name = ctx.unique("rg");
        ReaderGroupManager manager = ctx.readerGroupManager(scope);
        ReaderGroup group = group(ctx, manager, name, fromHead(scope, stream));
        EventStreamReader<String> reader = reader(ctx, factory, "r1", name);
        requireExactlyOnce(events(0, 20), read(reader, 20, READ_WITHIN), "events before the checkpoint");

        CompletableFuture<Checkpoint> pending = group.initiateCheckpoint("cp1", ReaderGroupSupport.executor(ctx));
        EventRead<String> marker = nextCheckpointEvent(reader);
        ctx.observe("checkpoint event name", marker.getCheckpointName());
        ctx.observe("checkpoint event carries an event", marker.getEvent() != null);
        Checkpoint checkpoint = awaitCheckpoint(pending, reader);
        ctx.observe("checkpoint name", checkpoint.getName());
        StreamCut cut = checkpoint.asImpl().getPositions().get(Stream.of(scope, stream));
        ctx.observe("checkpoint cut is the reader's position", ownedOffsets(marker.getPosition()).equals(cut.asImpl().getPositions()));
        ctx.observe("checkpoint cut is the tail", cut.equals(tail(ctx, scope, stream)));

        // A group started from the checkpoint reads exactly what was written after it.
        write(writer, 20, 30);
        String fromCheckpoint = ctx.unique("rg");
        group(ctx, manager, fromCheckpoint, ReaderGroupConfig.builder().startFromCheckpoint(checkpoint)
                .disableAutomaticCheckpoints().build());
        EventStreamReader<String> second = reader(ctx, factory, "r1", fromCheckpoint);
        requireExactlyOnce(events(20, 30), read(second, 10, READ_WITHIN), "events after the checkpoint");
        ctx.observe("nothing more after the checkpoint's events", second.readNextEvent(500).getEvent());
    }

    @Check
    public void resetReaderGroupReadsEverythingAgain(Ctx ctx) {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        write(writer(ctx, factory, stream), 0, 15);
        String name = ctx.unique("rg");
        ReaderGroupManager manager = ctx.readerGroupManager(scope);
        ReaderGroup group = group(ctx, manager, name, fromHead(scope, stream));
        EventStreamReader<String> first = reader(ctx, factory, "r1", name);
        requireExactlyOnce(events(0, 15), read(first, 15, READ_WITHIN), "first pass");
        first.close();
        group.resetReaderGroup();
        EventStreamReader<String> second = reader(ctx, factory, "r2", name);
        requireExactlyOnce(events(0, 15), read(second, 15, READ_WITHIN), "after resetReaderGroup");
        ctx.observe("more after the second pass", second.readNextEvent(500).getEvent());
        // The reset is an update of the group (generation 1): createReaderGroup now answers false.
        ctx.observe("create after the reset", manager.createReaderGroup(name, fromHead(scope, stream)));
    }

    @Check
    public void unreadBytesIsZeroOnceEverythingIsRead(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        write(writer(ctx, factory, stream), 0, 20);
        String name = ctx.unique("rg");
        ReaderGroup group = group(ctx, ctx.readerGroupManager(scope), name, fromHead(scope, stream));
        ctx.observe("unread bytes before reading > 0", group.getMetrics().unreadBytes() > 0);
        EventStreamReader<String> reader = reader(ctx, factory, "r1", name);
        requireExactlyOnce(events(0, 20), read(reader, 20, READ_WITHIN), "events");
        // Unread bytes count from the last completed checkpoint.
        CompletableFuture<Checkpoint> pending = group.initiateCheckpoint("cp1", ReaderGroupSupport.executor(ctx));
        nextCheckpointEvent(reader);
        awaitCheckpoint(pending, reader);
        ctx.observe("unread bytes after reading everything", group.getMetrics().unreadBytes());
    }

    @Check
    public void streamCutsFollowTheReaders(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        write(writer(ctx, factory, stream), 0, 20);
        String name = ctx.unique("rg");
        ReaderGroup group = group(ctx, ctx.readerGroupManager(scope), name, fromHead(scope, stream));
        Stream key = Stream.of(scope, stream);
        StreamCut head = ReaderGroupSupport.head(ctx, scope, stream);
        StreamCut end = tail(ctx, scope, stream);
        ctx.observe("getStreamCuts before reading is the head", head.equals(group.getStreamCuts().get(key)));
        EventStreamReader<String> reader = reader(ctx, factory, "r1", name);
        requireExactlyOnce(events(0, 20), read(reader, 20, READ_WITHIN), "events");
        CompletableFuture<Map<Stream, StreamCut>> generated = group.generateStreamCuts(ReaderGroupSupport.executor(ctx));
        // The silent checkpoint completes when the reader reads again.
        long deadline = System.nanoTime() + READ_WITHIN.toNanos();
        while (!generated.isDone()) {
            require(System.nanoTime() < deadline, "generateStreamCuts did not complete");
            require(reader.readNextEvent(200).getEvent() == null, "an event after the last one");
        }
        ctx.observe("generateStreamCuts after reading everything is the tail", end.equals(generated.get().get(key)));
        // getStreamCuts holds the offsets at which segments last changed hands; a reader going
        // offline hands them back at its final position.
        reader.close();
        ctx.observe("getStreamCuts after the reader closed is the tail", end.equals(group.getStreamCuts().get(key)));
    }

    @Check
    public void readerOfflineAtAPositionHandsOverWithoutLossOrDuplicate(Ctx ctx) {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        write(writer(ctx, factory, stream), 0, 30);
        String name = ctx.unique("rg");
        ReaderGroup group = group(ctx, ctx.readerGroupManager(scope), name, fromHead(scope, stream));
        EventStreamReader<String> first = reader(ctx, factory, "r1", name);
        List<String> read = new ArrayList<>();
        Position position = null;
        while (read.size() < 12) {
            EventRead<String> next = first.readNextEvent(ReaderGroupSupport.READ_TIMEOUT_MS);
            require(next.getEvent() != null || !next.isReadCompleted(), "end of stream after " + read);
            if (next.getEvent() != null) {
                read.add(next.getEvent());
                position = next.getPosition();
            }
        }
        // r1 is neither closed nor read again: the group hands its segments over at that position.
        group.readerOffline("r1", position);
        ctx.observe("online after readerOffline", group.getOnlineReaders().contains("r1"));
        EventStreamReader<String> second = reader(ctx, factory, "r2", name);
        read.addAll(read(second, 30 - read.size(), READ_WITHIN));
        requireExactlyOnce(events(0, 30), read, "events of both readers");
        ctx.observe("more for the second reader", second.readNextEvent(500).getEvent());
    }

    @Check
    public void twoReadersShareFourSegmentsAndReadEachEventOnce(Ctx ctx) {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 4);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        write(writer(ctx, factory, stream), 0, 40);
        String name = ctx.unique("rg");
        ReaderGroup group = group(ctx, ctx.readerGroupManager(scope), name, fromHead(scope, stream));
        // Both join before either reads, so each takes its fair share (two segments) on its first read.
        List<EventStreamReader<String>> readers = List.of(reader(ctx, factory, "r1", name), reader(ctx, factory, "r2", name));
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
    public void readsAcrossAScaleInKeyOrderToTheEnd(Ctx ctx) {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        EventStreamWriter<String> writer = writer(ctx, factory, stream);
        write(writer, 0, 20);
        String name = ctx.unique("rg");
        group(ctx, ctx.readerGroupManager(scope), name, withCheckpoints(scope, stream));
        EventStreamReader<String> reader = reader(ctx, factory, "r1", name);
        List<String> read = new ArrayList<>(read(reader, 5, READ_WITHIN));
        ScheduledExecutorService executor = ReaderGroupSupport.executor(ctx);
        ReaderGroupSupport.scale(ReaderGroupSupport.controller(ctx), Stream.of(scope, stream), List.of(0L),
                Map.of(0.0, 0.5, 0.5, 1.0), executor);
        write(writer, 20, 40);
        read.addAll(read(reader, 35, READ_WITHIN));
        requireExactlyOnce(events(0, 40), read, "events before and after the scale");
        ctx.observe("per-key order kept", ReaderGroupSupport.perKeyOrderKept(read));
        // Sealed after a scale, the stream ends where the successors end.
        ctx.observe("seal", ctx.streamManager().sealStream(scope, stream));
        ctx.observe("events after the seal", readToEnd(reader, READ_WITHIN));
    }

    @Check
    public void readsThroughASealToTheEndOfTheStream(Ctx ctx) {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        write(writer(ctx, factory, stream), 0, 20);
        String name = ctx.unique("rg");
        group(ctx, ctx.readerGroupManager(scope), name, withCheckpoints(scope, stream));
        EventStreamReader<String> reader = reader(ctx, factory, "r1", name);
        List<String> read = new ArrayList<>(read(reader, 8, READ_WITHIN));
        ctx.observe("seal", ctx.streamManager().sealStream(scope, stream));
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

    /**
     * A group from the head with an automatic checkpoint every second: a 0.13 reader gives up a
     * segment it read to its end (and learns its successors, or the end of the stream) only
     * right after a checkpoint.
     */
    private static ReaderGroupConfig withCheckpoints(String scope, String stream) {
        return ReaderGroupConfig.builder().stream(Stream.of(scope, stream)).automaticCheckpointIntervalMillis(1_000).build();
    }

    private static StreamConfiguration consumptionRetention(int segments) {
        return StreamConfiguration.builder().scalingPolicy(ScalingPolicy.fixed(segments))
                .retentionPolicy(RetentionPolicy.bySizeBytes(1, 1L << 30)).build();
    }

    /** What the controller answers to a subscriber cut for the group: "accepted" or the client's error. */
    private static String subscriberUpdate(ControllerImpl controller, String scope, String stream, String group,
                                           StreamCut cut) {
        ReaderGroupConfig config = controller.getReaderGroupConfig(scope, group).join();
        try {
            controller.updateSubscriberStreamCut(scope, stream, scope + "/" + group, config.getReaderGroupId(),
                    config.getGeneration(), cut).join();
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
            EventRead<String> next = reader.readNextEvent(ReaderGroupSupport.READ_TIMEOUT_MS);
            require(next.getEvent() == null, "an event after the last one: " + next.getEvent());
            if (next.isCheckpoint()) {
                return next;
            }
        }
    }

    /** A checkpoint completes when its reader reads again after the checkpoint event. */
    private static Checkpoint awaitCheckpoint(CompletableFuture<Checkpoint> pending, EventStreamReader<String> reader)
            throws Exception {
        long deadline = System.nanoTime() + READ_WITHIN.toNanos();
        while (!pending.isDone()) {
            require(System.nanoTime() < deadline, "the checkpoint did not complete");
            require(reader.readNextEvent(200).getEvent() == null, "an event after the last one");
        }
        return pending.get();
    }

    private static Checkpoint checkpoint(ReaderGroup group, EventStreamReader<String> reader, String name,
                                         ScheduledExecutorService executor) throws Exception {
        CompletableFuture<Checkpoint> pending = group.initiateCheckpoint(name, executor);
        nextCheckpointEvent(reader);
        return awaitCheckpoint(pending, reader);
    }

    private static Map<?, Long> ownedOffsets(Position position) {
        return ((PositionImpl) position.asImpl()).getOwnedSegmentsWithOffsets();
    }
}
