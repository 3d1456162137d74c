package io.pgcontroller.conformance;

import io.pravega.client.admin.StreamInfo;
import io.pravega.client.admin.StreamManager;
import io.pravega.client.control.impl.Controller;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.RetentionPolicy;
import io.pravega.client.stream.ScalingPolicy;
import io.pravega.client.stream.StreamConfiguration;
import io.pravega.client.stream.StreamCut;

import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;

import static io.pgcontroller.conformance.Ctx.ANSWER_SECONDS;
import static io.pgcontroller.conformance.Ctx.answer;
import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;
import static io.pgcontroller.conformance.EventSupport.fromHead;
import static io.pgcontroller.conformance.EventSupport.readUpTo;
import static io.pgcontroller.conformance.EventSupport.readerOfNewGroup;
import static io.pgcontroller.conformance.EventSupport.write;
import static io.pgcontroller.conformance.EventSupport.writer;
import static io.pgcontroller.conformance.StreamManagerSupport.events;
import static io.pgcontroller.conformance.StreamManagerSupport.expect;
import static io.pgcontroller.conformance.StreamManagerSupport.head;
import static io.pgcontroller.conformance.StreamManagerSupport.info;
import static io.pgcontroller.conformance.StreamManagerSupport.positions;
import static io.pgcontroller.conformance.StreamManagerSupport.streamNames;
import static io.pgcontroller.conformance.StreamManagerSupport.tail;
import static io.pgcontroller.conformance.StreamManagerSupport.totalOffset;

/**
 * StreamManager's streams: create (scaling, retention, tags), exists, list (by tag), the stored
 * configuration, update, truncate, seal, delete, and fetchStreamInfo's head and tail cuts.
 */
public class StreamChecks {

    @Check
    public void createStreamTwiceAnswersFalseTheSecondTime(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        String stream = ctx.unique("s");
        StreamConfiguration config = fixed(1);
        expect(ctx, "first", true, manager.createStream(scope, stream, config));
        expect(ctx, "second", false, manager.createStream(scope, stream, config));
        expect(ctx, "second with another config", false, manager.createStream(scope, stream, fixed(3)));
        equal(true, manager.checkStreamExists(scope, stream), "checkStreamExists of a created stream");
    }

    @Check
    public void checkStreamExistsAnswersFalseForMissingStreamsAndScopes(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        expect(ctx, "missing stream", false, manager.checkStreamExists(scope, ctx.unique("absent")));
        expect(ctx, "missing scope", false, manager.checkStreamExists(ctx.unique("absent"), ctx.unique("absent")));
    }

    @Check
    public void createStreamInAMissingScopeIsRefused(Ctx ctx) {
        String scope = ctx.unique("absent");
        ctx.observeRefusal("createStream", () -> ctx.streamManager().createStream(scope, ctx.unique("s"), fixed(1)));
        expect(ctx, "scope exists after", false, ctx.streamManager().checkScopeExists(scope));
    }

    @Check
    public void fixedScalingStartsWithThatManySegments(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 3);
        StreamInfo info = info(ctx, scope, stream);
        expect(ctx, "head segments", 3, positions(info.getHeadStreamCut()).size());
        expect(ctx, "tail segments", 3, positions(info.getTailStreamCut()).size());
        equal(fixed(3), info.getStreamConfiguration(), "stored configuration");
    }

    @Check
    public void eventRateScalingStartsWithItsMinimumSegments(Ctx ctx) throws Exception {
        createdWithScaling(ctx, ScalingPolicy.byEventRate(100, 2, 2));
    }

    @Check
    public void byteRateScalingStartsWithItsMinimumSegments(Ctx ctx) throws Exception {
        createdWithScaling(ctx, ScalingPolicy.byDataRate(1024, 3, 4));
    }

    private static void createdWithScaling(Ctx ctx, ScalingPolicy scaling) throws Exception {
        String scope = ctx.newScope();
        StreamConfiguration config = StreamConfiguration.builder().scalingPolicy(scaling).build();
        String stream = ctx.newStream(scope, config);
        StreamInfo info = info(ctx, scope, stream);
        expect(ctx, "tail segments", scaling.getMinNumSegments(), positions(info.getTailStreamCut()).size());
        equal(config, info.getStreamConfiguration(), "stored configuration");
    }

    @Check
    public void retentionBySizeRoundTrips(Ctx ctx) throws Exception {
        retentionRoundTrips(ctx, RetentionPolicy.bySizeBytes(10L << 20));
        retentionRoundTrips(ctx, RetentionPolicy.bySizeBytes(1L << 20, 100L << 20));
    }

    @Check
    public void retentionByTimeRoundTrips(Ctx ctx) throws Exception {
        retentionRoundTrips(ctx, RetentionPolicy.byTime(Duration.ofHours(2)));
        retentionRoundTrips(ctx, RetentionPolicy.byTime(Duration.ofMinutes(30), Duration.ofDays(1)));
    }

    private static void retentionRoundTrips(Ctx ctx, RetentionPolicy retention) throws Exception {
        String scope = ctx.newScope();
        StreamConfiguration config = fixed(1).toBuilder().retentionPolicy(retention).build();
        String stream = ctx.newStream(scope, config);
        equal(retention, info(ctx, scope, stream).getStreamConfiguration().getRetentionPolicy(), "stored retention");
    }

    @Check
    public void streamConfigurationRoundTrips(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        StreamConfiguration config = StreamConfiguration.builder()
                .scalingPolicy(ScalingPolicy.byEventRate(50, 2, 3))
                .retentionPolicy(RetentionPolicy.bySizeBytes(4L << 20, 64L << 20))
                .tags(List.of("red", "green"))
                .build();
        String stream = ctx.newStream(scope, config);
        StreamConfiguration stored = info(ctx, scope, stream).getStreamConfiguration();
        equal(config, stored, "stored configuration");
        equal(config.getTags(), stored.getTags(), "stored tags");
        // StreamManager sends neither of these, so the server's defaults come back.
        ctx.observe("timestampAggregationTimeout", stored.getTimestampAggregationTimeout());
        ctx.observe("rolloverSizeBytes", stored.getRolloverSizeBytes());
    }

    /** timestampAggregationTimeout and rolloverSizeBytes, which only the client's Controller sends. */
    @Check
    public void controllerKeepsTimestampAggregationTimeoutAndRolloverSize(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.unique("s");
        StreamConfiguration config = fixed(2).toBuilder()
                .timestampAggregationTimeout(45_000)
                .rolloverSizeBytes(8L << 20)
                .build();
        Controller controller = ControllerSupport.controller(ctx);
        require(controller.createStream(scope, stream, config).get(ANSWER_SECONDS, TimeUnit.SECONDS), "createStream answered false");
        StreamConfiguration stored = controller.getStreamConfiguration(scope, stream).get(ANSWER_SECONDS, TimeUnit.SECONDS);
        equal(config, stored, "stored configuration");
        StreamConfiguration updated = config.toBuilder().timestampAggregationTimeout(90_000).rolloverSizeBytes(16L << 20).build();
        require(controller.updateStream(scope, stream, updated).get(ANSWER_SECONDS, TimeUnit.SECONDS), "updateStream answered false");
        equal(updated, controller.getStreamConfiguration(scope, stream).get(ANSWER_SECONDS, TimeUnit.SECONDS), "updated configuration");
    }

    @Check
    public void tagsAreStoredAndListedByTag(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        String both = ctx.newStream(scope, fixed(1).toBuilder().tags(List.of("red", "blue")).build());
        String blue = ctx.newStream(scope, fixed(1).toBuilder().tag("blue").build());
        String untagged = ctx.newStream(scope, 1);
        equal(Set.of("red", "blue"), new HashSet<>(manager.getStreamTags(scope, both)), "tags of " + both);
        equal(Set.of(), new HashSet<>(manager.getStreamTags(scope, untagged)), "tags of an untagged stream");
        List<String> all = streamNames(manager.listStreams(scope));
        List<String> users = userStreams(all);
        equal(new TreeSet<>(Set.of(both, blue, untagged)), new TreeSet<>(users), "listStreams' user streams");
        equal(3, users.size(), "streams listed once each");
        // Both list each stream's internal _MARK stream beside it.
        ctx.observe("listStreams internal streams", new TreeSet<>(all.stream()
                .filter(name -> name.startsWith("_")).map(name -> name.replace(both, "<red,blue>")
                        .replace(blue, "<blue>").replace(untagged, "<untagged>")).toList()));
        equal(Set.of(both), new HashSet<>(streamNames(manager.listStreams(scope, "red"))), "listStreams(red)");
        equal(new TreeSet<>(Set.of(both, blue)), new TreeSet<>(streamNames(manager.listStreams(scope, "blue"))), "listStreams(blue)");
        expect(ctx, "listStreams(green) count", 0, streamNames(manager.listStreams(scope, "green")).size());
    }

    @Check
    public void updateStreamAddsAndRemovesTags(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, fixed(1).toBuilder().tags(List.of("old", "kept")).build());
        expect(ctx, "updated", true, manager.updateStream(scope, stream, fixed(1).toBuilder().tags(List.of("kept", "new")).build()));
        equal(Set.of("kept", "new"), new HashSet<>(manager.getStreamTags(scope, stream)), "tags after update");
        equal(List.of(), streamNames(manager.listStreams(scope, "old")), "listStreams(removed tag)");
        equal(List.of(stream), streamNames(manager.listStreams(scope, "new")), "listStreams(added tag)");
        equal(List.of(stream), streamNames(manager.listStreams(scope, "kept")), "listStreams(kept tag)");
    }

    @Check
    public void updateStreamToMoreSegmentsScalesTheStream(Ctx ctx) throws Exception {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        expect(ctx, "updated", true, manager.updateStream(scope, stream, fixed(3)));
        StreamInfo info = info(ctx, scope, stream);
        equal(fixed(3), info.getStreamConfiguration(), "configuration after update");
        // updateStream answers once the update (with its scale) is done, so no waiting is needed.
        expect(ctx, "tail segments", 3, positions(info.getTailStreamCut()).size());
        // Nothing was truncated: the head is still the first epoch's segment.
        expect(ctx, "head segments", 1, positions(info.getHeadStreamCut()).size());
    }

    @Check
    public void updateStreamChangesRetention(Ctx ctx) throws Exception {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        StreamConfiguration bySize = fixed(1).toBuilder().retentionPolicy(RetentionPolicy.bySizeBytes(2L << 20)).build();
        expect(ctx, "to size", true, manager.updateStream(scope, stream, bySize));
        equal(bySize.getRetentionPolicy(), info(ctx, scope, stream).getStreamConfiguration().getRetentionPolicy(), "retention by size");
        StreamConfiguration byTime = fixed(1).toBuilder().retentionPolicy(RetentionPolicy.byTime(Duration.ofHours(1))).build();
        expect(ctx, "to time", true, manager.updateStream(scope, stream, byTime));
        equal(byTime.getRetentionPolicy(), info(ctx, scope, stream).getStreamConfiguration().getRetentionPolicy(), "retention by time");
        expect(ctx, "to none", true, manager.updateStream(scope, stream, fixed(1)));
        expect(ctx, "retention after removal", null, info(ctx, scope, stream).getStreamConfiguration().getRetentionPolicy());
    }

    @Check
    public void updateMissingStreamIsRefused(Ctx ctx) {
        String scope = ctx.newScope();
        ctx.observeRefusal("updateStream", () -> ctx.streamManager().updateStream(scope, ctx.unique("absent"), fixed(2)));
    }

    @Check
    public void fetchStreamInfoOfANewStreamHasEqualHeadAndTailAtZero(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        StreamInfo info = info(ctx, scope, stream);
        equal(info.getHeadStreamCut(), info.getTailStreamCut(), "head and tail of a new stream");
        ctx.observe("offsets", positions(info.getTailStreamCut()).values());
        equal(0L, totalOffset(info.getTailStreamCut()), "offsets of a new stream's tail");
        expect(ctx, "sealed", false, info.isSealed());
    }

    @Check
    public void fetchStreamInfoTailMovesWithWritesAndHeadStays(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        StreamCut head = info(ctx, scope, stream).getHeadStreamCut();
        EventStreamWriter<String> writer = writer(ctx, ctx.clientFactory(scope), stream);
        write(writer, events(0, 20));
        StreamInfo afterSome = info(ctx, scope, stream);
        write(writer, events(20, 40));
        StreamInfo afterMore = info(ctx, scope, stream);
        equal(head, afterMore.getHeadStreamCut(), "head after writes");
        require(totalOffset(afterSome.getTailStreamCut()) > 0, "tail did not move: " + afterSome.getTailStreamCut());
        require(totalOffset(afterMore.getTailStreamCut()) > totalOffset(afterSome.getTailStreamCut()),
                "tail did not move with more writes");
        expect(ctx, "tail segments", 2, positions(afterMore.getTailStreamCut()).size());
    }

    @Check
    public void fetchStreamInfoOfAMissingStreamFails(Ctx ctx) {
        String scope = ctx.newScope();
        ctx.observeRefusal("missing stream", () -> info(ctx, scope, ctx.unique("absent")));
    }

    @Check
    public void truncateStreamMovesTheHeadToTheCut(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(2);
        EventStreamWriter<String> writer = writer(ctx, target);
        write(writer, events(0, 30));
        StreamCut cut = tail(ctx, target);
        List<String> afterCut = write(writer, events(30, 50));
        expect(ctx, "truncated", true, ctx.streamManager().truncateStream(target.scope(), target.name(), cut));
        equal(cut, head(ctx, target), "head after truncation");
        // Within a segment the events before the cut come first, so any of them read would show here.
        EventStreamReader<String> reader = readerOfNewGroup(ctx, target, fromHead(target.stream()));
        equal(new TreeSet<>(afterCut), new TreeSet<>(readUpTo(reader, afterCut.size(), Duration.ofSeconds(ANSWER_SECONDS))),
                "events read from the head");
    }

    @Check
    public void sealedStreamRefusesWrites(Ctx ctx) throws Exception {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        EventStreamWriter<String> writer = writer(ctx, ctx.clientFactory(scope), stream);
        write(writer, events(0, 5));
        expect(ctx, "sealed", true, manager.sealStream(scope, stream));
        expect(ctx, "sealed again", true, manager.sealStream(scope, stream));
        StreamInfo info = info(ctx, scope, stream);
        expect(ctx, "info sealed", true, info.isSealed());
        expect(ctx, "tail segments", 0, positions(info.getTailStreamCut()).size());
        ctx.observeRefusal("write by an open writer",
                () -> writer.writeEvent("key", "late").get(ANSWER_SECONDS, TimeUnit.SECONDS));
        ctx.observeRefusal("new writer", () -> writer(ctx, ctx.clientFactory(scope), stream)
                .writeEvent("key", "late").get(ANSWER_SECONDS, TimeUnit.SECONDS));
        ctx.observeRefusal("updateStream", () -> manager.updateStream(scope, stream, fixed(3)));
        ctx.observeRefusal("truncateStream", () -> manager.truncateStream(scope, stream, info.getHeadStreamCut()));
    }

    @Check
    public void sealMissingStreamIsRefused(Ctx ctx) {
        String scope = ctx.newScope();
        ctx.observeRefusal("sealStream", () -> ctx.streamManager().sealStream(scope, ctx.unique("absent")));
    }

    @Check
    public void deleteSealedStreamAnswersTrueAndRemovesIt(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        String other = ctx.newStream(scope, 1);
        require(manager.sealStream(scope, stream), "sealStream answered false");
        expect(ctx, "deleted", true, manager.deleteStream(scope, stream));
        expect(ctx, "exists after", false, manager.checkStreamExists(scope, stream));
        List<String> listed = streamNames(manager.listStreams(scope));
        equal(List.of(other), userStreams(listed), "user streams listed after the delete");
        ctx.observe("internal streams listed after", listed.size() - userStreams(listed).size());
        expect(ctx, "deleted again", false, manager.deleteStream(scope, stream));
        expect(ctx, "recreated", true, manager.createStream(scope, stream, fixed(1)));
    }

    @Check
    public void deleteUnsealedStreamIsRefused(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        ctx.observeRefusal("deleteStream", () -> manager.deleteStream(scope, stream));
        expect(ctx, "exists after", true, manager.checkStreamExists(scope, stream));
    }

    @Check
    public void deleteMissingStreamAnswersFalse(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        expect(ctx, "deleteStream", false, manager.deleteStream(scope, ctx.unique("absent")));
    }

    @Check
    public void zeroMinimumSegmentsIsRefused(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        ctx.observeRefusal("ScalingPolicy.fixed(0)", () -> ScalingPolicy.fixed(0));
        // The builder does not validate, so this reaches the server.
        ScalingPolicy zero = ScalingPolicy.builder().scaleType(ScalingPolicy.ScaleType.FIXED_NUM_SEGMENTS).minNumSegments(0).build();
        String stream = ctx.unique("s");
        ctx.observeRefusal("createStream", () -> manager.createStream(scope, stream,
                StreamConfiguration.builder().scalingPolicy(zero).build()));
        // Pravega leaves the stream it failed to create behind, half made.
        ctx.observe("exists after", manager.checkStreamExists(scope, stream));
    }

    @Check
    public void illegalStreamNameIsRefused(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        ctx.observeRefusal("createStream", () -> manager.createStream(scope, "bad/name", fixed(1)));
        // checkStreamExists does not validate on the client, so this one reaches the server.
        expect(ctx, "checkStreamExists", "false", answer(() -> manager.checkStreamExists(scope, "bad/name")));
    }

    /** Leaves out the internal streams (`_MARK<stream>`, `_RG<group>`) a controller makes beside a user's. */
    private static List<String> userStreams(List<String> names) {
        return names.stream().filter(name -> !name.startsWith("_")).toList();
    }

    private static StreamConfiguration fixed(int segments) {
        return StreamConfiguration.builder().scalingPolicy(ScalingPolicy.fixed(segments)).build();
    }
}
