package io.pgcontroller.conformance;

import io.pravega.client.SynchronizerClientFactory;
import io.pravega.client.state.InitialUpdate;
import io.pravega.client.state.Revision;
import io.pravega.client.state.Revisioned;
import io.pravega.client.state.RevisionedStreamClient;
import io.pravega.client.state.StateSynchronizer;
import io.pravega.client.state.SynchronizerConfig;
import io.pravega.client.state.Update;
import io.pravega.client.stream.impl.JavaSerializer;
import io.pravega.client.stream.impl.UTF8StringSerializer;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;

/**
 * SynchronizerClientFactory: a StateSynchronizer over a small list state (initialize, conditional
 * updates seen by a second synchronizer, two synchronizers compacting at once), and the
 * RevisionedStreamClient under it (conditional and unconditional writes, readFrom, the latest and
 * oldest revisions, marks, truncateToRevision).
 */
public class SynchronizerChecks {

    @Check
    public void updatesOfOneSynchronizerReachAnother(Ctx ctx) {
        Synchronizers pair = new Synchronizers(ctx);
        StateSynchronizer<Names> a = pair.create();
        StateSynchronizer<Names> b = pair.create();

        a.initialize(new Reset(List.of("init")));
        b.initialize(new Reset(List.of("ignored: already initialized")));
        equal(List.of("init"), b.getState().names(), "b's state after initialize found a's");

        equal(1, add(a, "from a"), "update attempts of an up-to-date synchronizer");
        equal(List.of("init"), b.getState().names(), "b's state before fetchUpdates");
        // b is one update behind: its first conditional write fails, it fetches and tries again.
        equal(2, add(b, "from b"), "update attempts of a synchronizer one update behind");
        equal(List.of("init", "from a", "from b"), b.getState().names(), "b's state after its update");
        a.fetchUpdates();
        equal(b.getState().names(), a.getState().names(), "a's state after fetchUpdates");
        ctx.observe("a's state after fetchUpdates", a.getState().names());

        b.updateStateUnconditionally(new Add("unconditional"));
        a.fetchUpdates();
        b.fetchUpdates();
        equal(List.of("init", "from a", "from b", "unconditional"), a.getState().names(), "state after an unconditional update");
        equal(a.getState().names(), b.getState().names(), "both states after an unconditional update");
        ctx.observe("revisions equal", a.getState().getRevision().equals(b.getState().getRevision()));
    }

    @Check
    public void racingCompactionsAgreeAndLaterUpdatesApply(Ctx ctx) throws Exception {
        Synchronizers pair = new Synchronizers(ctx);
        StateSynchronizer<Names> a = pair.create();
        StateSynchronizer<Names> b = pair.create();
        // Only to look at the stream's mark and oldest revision; it never reads a value.
        RevisionedStreamClient<String> look = pair.revisionedClient();
        Revision streamStart = look.fetchOldestRevision();
        a.initialize(new Reset(List.of()));
        // Left behind at the initial state, before every mark: its next fetch meets the truncation.
        StateSynchronizer<Names> stale = pair.create();
        stale.fetchUpdates();
        equal(List.of(), stale.getState().names(), "a third synchronizer's initial state");
        for (int i = 0; i < 10; i++) {
            add(i % 2 == 0 ? a : b, "n" + i);
        }
        a.fetchUpdates();
        b.fetchUpdates();
        List<String> expected = new ArrayList<>(a.getState().names());
        ctx.observe("bytes written since compaction > 0", a.bytesWrittenSinceCompaction() > 0);

        // Twice: a compaction that finds a mark truncates the stream at it, so the second round truncates.
        for (int round = 0; round < 2; round++) {
            compactAtOnce(a, b);
            a.fetchUpdates();
            b.fetchUpdates();
            equal(expected, a.getState().names(), "a's state after compaction round " + round);
            equal(expected, b.getState().names(), "b's state after compaction round " + round);
            add(round == 0 ? a : b, "after compaction " + round);
            expected.add("after compaction " + round);
            a.fetchUpdates();
            b.fetchUpdates();
            equal(expected, a.getState().names(), "a's state after an update following compaction " + round);
            equal(expected, b.getState().names(), "b's state after an update following compaction " + round);
            ctx.observe("round " + round + ": mark set", look.getMark() != null);
        }
        // Whether the first round truncates depends on whether one racer already saw the other's
        // mark; the second round always finds a mark and truncates at it.
        ctx.observe("stream truncated after the second round", look.fetchOldestRevision().compareTo(streamStart) > 0);
        stale.fetchUpdates();
        equal(expected, stale.getState().names(), "state of a synchronizer that last read before the truncation");
        StateSynchronizer<Names> late = pair.create();
        late.fetchUpdates();
        equal(expected, late.getState().names(), "a new synchronizer's state after compactions");
        ctx.observe("final state", late.getState().names());
    }

    @Check
    public void writeConditionallySucceedsOnlyAtTheLatestRevision(Ctx ctx) {
        RevisionedStreamClient<String> client = revisionedClient(ctx);
        Revision start = client.fetchLatestRevision();
        ctx.observe("oldest = latest of an empty stream", start.equals(client.fetchOldestRevision()));

        Revision first = client.writeConditionally(start, "one");
        ctx.observe("write at the latest revision", first != null);
        require(first != null, "writeConditionally at the latest revision answered null");
        ctx.observe("latest = the revision written", first.equals(client.fetchLatestRevision()));
        ctx.observe("write at a stale revision", client.writeConditionally(start, "stale"));
        Revision second = client.writeConditionally(first, "two");
        require(second != null, "writeConditionally at the new latest revision answered null");
        ctx.observe("revisions ordered", start.compareTo(first) < 0 && first.compareTo(second) < 0);

        client.writeUnconditionally("three");
        Revision latest = client.fetchLatestRevision();
        ctx.observe("latest moved past an unconditional write", second.compareTo(latest) < 0);
        ctx.observe("write at the revision before the unconditional write", client.writeConditionally(second, "stale"));

        ctx.observe("read from the start", values(client.readFrom(start)));
        ctx.observe("read from the first revision", values(client.readFrom(first)));
        ctx.observe("read from the latest", values(client.readFrom(latest)));
        equal(List.of("one", "two", "three"), values(client.readFrom(start)), "values read from the start");
        ctx.observe("revisions read", readRevisions(client, start).equals(List.of(first, second, latest)));
    }

    @Check
    public void marksAndTruncateToRevision(Ctx ctx) {
        RevisionedStreamClient<String> client = revisionedClient(ctx);
        Revision start = client.fetchLatestRevision();
        Revision first = client.writeConditionally(start, "one");
        Revision second = client.writeConditionally(first, "two");
        Revision third = client.writeConditionally(second, "three");
        require(first != null && second != null && third != null, "conditional writes in sequence");

        ctx.observe("first mark", client.getMark());
        ctx.observe("set mark expecting none", client.compareAndSetMark(null, first));
        ctx.observe("set mark expecting none again", client.compareAndSetMark(null, second));
        ctx.observe("mark = first", first.equals(client.getMark()));
        ctx.observe("set mark expecting a wrong one", client.compareAndSetMark(second, third));
        ctx.observe("set mark expecting the current one", client.compareAndSetMark(first, second));
        ctx.observe("mark = second", second.equals(client.getMark()));

        client.truncateToRevision(second);
        ctx.observe("oldest = truncation revision", second.equals(client.fetchOldestRevision()));
        String beforeTruncation = Ctx.thrown(() -> client.readFrom(first));
        ctx.observe("read from before the truncation", beforeTruncation);
        equal("TruncatedDataException", beforeTruncation, "readFrom a revision before the truncation");
        ctx.observe("read from the start", Ctx.thrown(() -> client.readFrom(start)));
        ctx.observe("read from the truncation revision", values(client.readFrom(second)));
        ctx.observe("mark kept after truncation", second.equals(client.getMark()));
        ctx.observe("write at the latest after truncation", client.writeConditionally(third, "four") != null);
        equal(List.of("three", "four"), values(client.readFrom(second)), "values after the truncation revision");
    }

    /** Runs a.compact and b.compact at the same moment, each copying its state into a Reset. */
    private static void compactAtOnce(StateSynchronizer<Names> a, StateSynchronizer<Names> b) throws Exception {
        CyclicBarrier start = new CyclicBarrier(2);
        CompletableFuture<Void> first = CompletableFuture.runAsync(() -> compactAfter(start, a));
        CompletableFuture<Void> second = CompletableFuture.runAsync(() -> compactAfter(start, b));
        CompletableFuture.allOf(first, second).get(60, TimeUnit.SECONDS);
    }

    private static void compactAfter(CyclicBarrier start, StateSynchronizer<Names> synchronizer) {
        try {
            start.await(30, TimeUnit.SECONDS);
        } catch (Exception e) {
            throw new IllegalStateException("the other compaction did not start", e);
        }
        synchronizer.compact(state -> new Reset(state.names()));
    }

    /** Adds {@code name} conditionally; answers how often the update generator ran. */
    private static int add(StateSynchronizer<Names> synchronizer, String name) {
        AtomicInteger attempts = new AtomicInteger();
        synchronizer.updateState((state, updates) -> {
            attempts.incrementAndGet();
            updates.add(new Add(name));
        });
        return attempts.get();
    }

    private static <T> List<T> values(Iterator<Map.Entry<Revision, T>> entries) {
        List<T> values = new ArrayList<>();
        entries.forEachRemaining(entry -> values.add(entry.getValue()));
        return values;
    }

    private static List<Revision> readRevisions(RevisionedStreamClient<String> client, Revision from) {
        List<Revision> revisions = new ArrayList<>();
        client.readFrom(from).forEachRemaining(entry -> revisions.add(entry.getKey()));
        return revisions;
    }

    /** A revisioned client of a new stream of its own. */
    private static RevisionedStreamClient<String> revisionedClient(Ctx ctx) {
        return new Synchronizers(ctx).revisionedClient();
    }

    /** Synchronizers on one new stream, each with a factory of its own (as separate processes would have). */
    private static final class Synchronizers {
        private final Ctx ctx;
        private final String scope;
        private final String stream;

        Synchronizers(Ctx ctx) {
            this.ctx = ctx;
            this.scope = ctx.newScope();
            this.stream = ctx.newStream(scope, 1);
        }

        StateSynchronizer<Names> create() {
            SynchronizerClientFactory factory = ctx.closeLater(SynchronizerClientFactory.withScope(scope, ctx.clientConfig()));
            return ctx.closeLater(factory.createStateSynchronizer(stream, new JavaSerializer<Add>(),
                    new JavaSerializer<Reset>(), SynchronizerConfig.builder().build()));
        }

        RevisionedStreamClient<String> revisionedClient() {
            SynchronizerClientFactory factory = ctx.closeLater(SynchronizerClientFactory.withScope(scope, ctx.clientConfig()));
            return ctx.closeLater(factory.createRevisionedStreamClient(stream, new UTF8StringSerializer(),
                    SynchronizerConfig.builder().build()));
        }
    }

    /** The synchronized state: a list of names, in the order they were added. */
    record Names(String scopedStreamName, Revision revision, List<String> names) implements Revisioned {
        @Override
        public String getScopedStreamName() {
            return scopedStreamName;
        }

        @Override
        public Revision getRevision() {
            return revision;
        }
    }

    /** Appends one name. */
    record Add(String name) implements Update<Names>, Serializable {
        @Override
        public Names applyTo(Names old, Revision newRevision) {
            List<String> names = new ArrayList<>(old.names());
            names.add(name);
            return new Names(old.scopedStreamName(), newRevision, List.copyOf(names));
        }
    }

    /** The initial state, and a compaction's copy of a state. */
    record Reset(List<String> names) implements InitialUpdate<Names>, Serializable {
        Reset {
            names = new ArrayList<>(names);
        }

        @Override
        public Names create(String scopedStreamName, Revision revision) {
            return new Names(scopedStreamName, revision, List.copyOf(names));
        }
    }
}
