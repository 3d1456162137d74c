package io.pgcontroller.conformance;

import io.pgcontroller.conformance.EventSupport.Keyed;
import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.control.impl.Controller;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.Stream;
import io.pravega.client.stream.Transaction;
import io.pravega.client.stream.TransactionalEventStreamWriter;
import io.pravega.client.stream.TxnFailedException;
import io.pravega.client.stream.impl.ClientFactoryImpl;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;
import static io.pgcontroller.conformance.EventSupport.READ_WITHIN;
import static io.pgcontroller.conformance.EventSupport.STRINGS;
import static io.pgcontroller.conformance.EventSupport.readEachOnceInKeyOrder;
import static io.pgcontroller.conformance.EventSupport.readExactly;
import static io.pgcontroller.conformance.EventSupport.readRemaining;
import static io.pgcontroller.conformance.EventSupport.writer;
import static io.pgcontroller.conformance.WriterSupport.NOTHING_MORE;
import static io.pgcontroller.conformance.WriterSupport.interleaved;
import static io.pgcontroller.conformance.WriterSupport.keys;
import static io.pgcontroller.conformance.WriterSupport.observeNothingAfterTheLast;
import static io.pgcontroller.conformance.WriterSupport.readerFromStart;

/**
 * TransactionalEventStreamWriter: commit (with and without a timestamp) and when its events become
 * visible, abort, getTxn of an open and of an unknown transaction, lease bounds and the expiry of a
 * transaction nobody pings, the order of a transaction opened before a scale, transactions and a
 * sealed stream, and commits and aborts repeated on a finished transaction.
 */
public class TransactionChecks {
    private static final Duration COMPLETES_WITHIN = Duration.ofSeconds(60);
    private static final EventWriterConfig DEFAULTS = EventWriterConfig.builder().build();
    /** Events per group in the ordering check. */
    private static final int GROUP = 4;

    @Check
    public void committedEventsBecomeVisibleOnlyAfterTheCommit(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(2);
        TransactionalEventStreamWriter<String> txnWriter = txnWriter(ctx, target);
        EventStreamWriter<String> writer = writer(ctx, target);
        List<String> keys = keys("t", 3);

        Transaction<String> txn = txnWriter.beginTxn();
        ctx.observe("status after begin", txn.checkStatus());
        write(txn, interleaved(keys, 0, 10));
        txn.flush();
        ctx.observe("status after flush", txn.checkStatus());
        EventStreamReader<String> reader = readerFromStart(ctx, target);
        ctx.observe("events before the commit", eventsBeforeMarkers(writer, reader, keys));

        txn.commit();
        requireCommitting(awaitStatus(txn, Transaction.Status.COMMITTED));
        ctx.observe("events after the commit", readEachOnceInKeyOrder(reader, interleaved(keys, 0, 10)).size());
        observeNothingAfterTheLast(ctx, reader);
    }

    @Check
    public void aCommitWithATimestampCommits(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(1);
        Transaction<String> txn = txnWriter(ctx, target).beginTxn();
        List<Keyed> events = interleaved(List.of("c"), 0, 10);
        write(txn, events);
        txn.commit(System.currentTimeMillis());
        requireCommitting(awaitStatus(txn, Transaction.Status.COMMITTED));
        ctx.observe("status", txn.checkStatus());

        readEachOnceInKeyOrder(readerFromStart(ctx, target), events);
    }

    @Check
    public void abortedEventsAreNeverVisible(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(2);
        TransactionalEventStreamWriter<String> txnWriter = txnWriter(ctx, target);
        EventStreamWriter<String> writer = writer(ctx, target);
        List<String> keys = keys("a", 3);

        Transaction<String> txn = txnWriter.beginTxn();
        write(txn, interleaved(keys, 0, 10));
        txn.flush();
        txn.abort();
        List<Transaction.Status> seen = awaitStatus(txn, Transaction.Status.ABORTED);
        require(seen.stream().allMatch(s -> s == Transaction.Status.ABORTING || s == Transaction.Status.ABORTED),
                "statuses after abort: " + seen);
        ctx.observe("status", txn.checkStatus());
        ctx.observe("write after abort", Ctx.thrown(() -> txn.writeEvent("a0", "a0:99")));
        // The markers follow the abort: had the aborted events been merged, they would come before them.
        EventStreamReader<String> reader = readerFromStart(ctx, target);
        ctx.observe("events read", eventsBeforeMarkers(writer, reader, keys));
        ctx.observe("events after the markers", readRemaining(reader, NOTHING_MORE).size());
    }

    /** Another writer's handle on an open transaction writes into the same transaction and commits it. */
    @Check
    public void getTxnContinuesAnOpenTransaction(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(2);
        Transaction<String> first = txnWriter(ctx, target).beginTxn();
        List<String> keys = keys("g", 2);
        write(first, interleaved(keys, 0, 5));
        first.flush();

        Transaction<String> second = txnWriter(ctx, target).getTxn(first.getTxnId());
        ctx.observe("status through getTxn", second.checkStatus());
        equal(first.getTxnId(), second.getTxnId(), "getTxn's transaction id");
        write(second, interleaved(keys, 5, 10));
        second.commit();
        requireCommitting(awaitStatus(second, Transaction.Status.COMMITTED));
        ctx.observe("status seen by the first handle", first.checkStatus());

        EventStreamReader<String> reader = readerFromStart(ctx, target);
        readEachOnceInKeyOrder(reader, interleaved(keys, 0, 10));
        observeNothingAfterTheLast(ctx, reader);
        // getTxn of a committed transaction gives a closed handle: it refuses writes without asking the server.
        Transaction<String> closed = txnWriter(ctx, target).getTxn(first.getTxnId());
        ctx.observe("write through getTxn of a committed txn", Ctx.thrown(() -> closed.writeEvent("g0", "g0:99")));
    }

    /** The controller answers UNKNOWN for an id it never issued; the client turns that into gRPC NOT_FOUND. */
    @Check
    public void getTxnOfAnUnknownIdFails(Ctx ctx) throws Exception {
        TransactionalEventStreamWriter<String> txnWriter = txnWriter(ctx, ctx.newScopedStream(1));
        // The stream has had a transaction, so the ids below are unknown, not merely the first.
        txnWriter.beginTxn().abort();
        long low = ThreadLocalRandom.current().nextLong() | 1L << 40;
        observeFailure(ctx, "epoch 0", () -> txnWriter.getTxn(new UUID(0L, low)));
        observeFailure(ctx, "epoch 7 (never existed)", () -> txnWriter.getTxn(new UUID(7L << 32, low)));
    }

    /**
     * A writer pings its transactions until it is closed; a transaction left open by a closed
     * writer is aborted once its lease (the minimum, 10 s) runs out. Waits for a server timer.
     */
    @Check(timeoutSeconds = 120) // the 10 s lease, then the server's expiry (Pravega: a timer wheel)
    public void aTransactionNobodyPingsIsAbortedWhenItsLeaseExpires(Ctx ctx) throws Exception {
        ctx.observe("client config with a 9999 ms lease",
                Ctx.thrown(() -> EventWriterConfig.builder().transactionTimeoutTime(9999).build()));
        ScopedStream target = ctx.newScopedStream(1);
        TransactionalEventStreamWriter<String> txnWriter = txnWriter(ctx, target.factory(), target.name(),
                EventWriterConfig.builder().transactionTimeoutTime(10_000).build());
        Transaction<String> txn = txnWriter.beginTxn();
        write(txn, interleaved(List.of("l"), 0, 5));
        txn.flush();
        txnWriter.close();
        long closedAt = System.nanoTime();
        List<Transaction.Status> seen = awaitStatus(txn, Transaction.Status.ABORTED);
        long seconds = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - closedAt);
        require(seen.get(0) == Transaction.Status.OPEN, "not open right after its writer closed: " + seen);
        ctx.observe("status", txn.checkStatus());
        ctx.observe("aborted within 30 s of the writer's close", seconds < 30);
        ctx.observe("commit after the expiry", Ctx.thrown(txn::commit));
    }

    /** Which leases createTransaction accepts: Pravega's defaults are 10 s to 600 s. */
    @Check
    public void createTransactionAcceptsLeasesFrom10sTo600s(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        // One attempt: Pravega answers a refused lease with UNKNOWN, which the client would retry for a minute.
        Controller controller = ControllerSupport.singleAttemptController(ctx, ctx.clientConfig());
        for (long lease : new long[] {5_000, 9_999, 10_000, 600_000, 600_001}) {
            boolean accepted = Ctx.thrown(() -> controller.createTransaction(Stream.of(scope, stream), lease)
                    .get(30, TimeUnit.SECONDS)).equals("none");
            ctx.observe("lease " + lease + " accepted", accepted);
        }
    }

    /**
     * A transaction of epoch 0 committed after a scale is rolled over: its events land in copies of
     * epoch 0's segments placed after the epoch that was current when it committed. So for one key,
     * events written after the scale but before the commit come first, then the old transaction's,
     * then a transaction of the new epoch committed later, then events written after both commits.
     */
    @Check
    public void aTransactionOpenedBeforeAScaleIsCommittedAfterTheNewEpochsEvents(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(1);
        TransactionalEventStreamWriter<String> txnWriter = txnWriter(ctx, target);
        EventStreamWriter<String> writer = writer(ctx, target);
        ScheduledExecutorService executor = ctx.executor();
        Controller controller = ControllerSupport.controller(ctx);
        String key = "o";

        writeGroup(writer, key, "pre");
        Transaction<String> before = txnWriter.beginTxn();
        writeGroup(before, key, "txnA");
        ControllerSupport.scale(controller, executor, target.stream(), List.of(ControllerSupport.segmentId(0, 0)),
                Map.of(0.0, 0.5, 0.5, 1.0));
        writeGroup(writer, key, "post");
        Transaction<String> after = txnWriter.beginTxn();
        writeGroup(after, key, "txnB");
        before.commit();
        awaitStatus(before, Transaction.Status.COMMITTED);
        after.commit();
        awaitStatus(after, Transaction.Status.COMMITTED);
        writeGroup(writer, key, "last");

        String order = groupOrder(readExactly(readerFromStart(ctx, target), 5 * GROUP, READ_WITHIN));
        ctx.observe("order", order);
        equal("pre,post,txnA,txnB,last", order, "order of the groups for one key");
        ctx.observe("segments after the commits", controller.getCurrentSegments(target.scope(), target.name())
                .get(30, TimeUnit.SECONDS).getSegments().size());
    }

    /** Sealing aborts the open transactions; a sealed stream refuses new ones. */
    @Check
    public void aSealedStreamAbortsOpenTransactionsAndRefusesNewOnes(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        // One attempt: both servers answer createTransaction on a sealed stream with a code the client retries.
        Controller controller = ControllerSupport.singleAttemptController(ctx, ctx.clientConfig());
        EventStreamClientFactory factory = ctx.closeLater(new ClientFactoryImpl(scope, controller, ctx.clientConfig()));
        TransactionalEventStreamWriter<String> txnWriter = txnWriter(ctx, factory, stream, DEFAULTS);
        Transaction<String> open = txnWriter.beginTxn();
        write(open, interleaved(List.of("z"), 0, 5));
        open.flush();

        ctx.observe("seal", ctx.streamManager().sealStream(scope, stream));
        ctx.observe("open transaction after the seal", open.checkStatus());
        ctx.observe("commit after the seal", Ctx.thrown(open::commit));
        ctx.observe("beginTxn on the sealed stream", Ctx.thrown(txnWriter::beginTxn));
    }

    /** A transaction's end is final: commit is idempotent, abort of a committed one and commit of an aborted one fail. */
    @Check
    public void aFinishedTransactionStaysFinished(Ctx ctx) throws Exception {
        ScopedStream target = ctx.newScopedStream(1);
        TransactionalEventStreamWriter<String> txnWriter = txnWriter(ctx, target);
        Controller controller = ControllerSupport.singleAttemptController(ctx, ctx.clientConfig());
        Stream stream = target.stream();

        Transaction<String> committed = txnWriter.beginTxn();
        List<Keyed> events = interleaved(List.of("d"), 0, 3);
        write(committed, events);
        committed.commit();
        awaitStatus(committed, Transaction.Status.COMMITTED);
        ctx.observe("commit again (same handle)", Ctx.thrown(committed::commit));
        ctx.observe("commit again (controller)", Ctx.thrown(() -> controller.commitTransaction(stream, "w", null,
                committed.getTxnId()).get(30, TimeUnit.SECONDS)));
        ctx.observe("abort after commit (controller)", Ctx.thrown(() -> controller.abortTransaction(stream,
                committed.getTxnId()).get(30, TimeUnit.SECONDS)));
        ctx.observe("status after both", committed.checkStatus());

        Transaction<String> aborted = txnWriter.beginTxn();
        aborted.abort();
        awaitStatus(aborted, Transaction.Status.ABORTED);
        ctx.observe("commit after abort (controller)", Ctx.thrown(() -> controller.commitTransaction(stream, "w", null,
                aborted.getTxnId()).get(30, TimeUnit.SECONDS)));
        ctx.observe("abort again (controller)", Ctx.thrown(() -> controller.abortTransaction(stream,
                aborted.getTxnId()).get(30, TimeUnit.SECONDS)));
        ctx.observe("status of the aborted", aborted.checkStatus());

        readEachOnceInKeyOrder(readerFromStart(ctx, target), events);
    }

    private static TransactionalEventStreamWriter<String> txnWriter(Ctx ctx, ScopedStream target) {
        return txnWriter(ctx, target.factory(), target.name(), DEFAULTS);
    }

    private static TransactionalEventStreamWriter<String> txnWriter(Ctx ctx, EventStreamClientFactory factory, String stream,
                                                                    EventWriterConfig config) {
        return ctx.closeLater(factory.createTransactionalEventWriter(ctx.unique("tw"), stream, STRINGS, config));
    }

    /** Writes {@code events} into the transaction, each under its key. */
    private static void write(Transaction<String> txn, List<Keyed> events) throws TxnFailedException {
        for (Keyed event : events) {
            txn.writeEvent(event.key(), event.event());
        }
    }

    /** Polls the transaction until it reaches {@code wanted}; every status seen on the way is recorded. */
    private static List<Transaction.Status> awaitStatus(Transaction<?> txn, Transaction.Status wanted) throws Exception {
        List<Transaction.Status> seen = new ArrayList<>();
        Ctx.eventually(COMPLETES_WITHIN, "transaction status " + wanted, () -> {
            Transaction.Status status = txn.checkStatus();
            if (seen.isEmpty() || seen.get(seen.size() - 1) != status) {
                seen.add(status);
            }
            return status == wanted;
        });
        return seen;
    }

    /** {@link #GROUP} events {@code group.i} of one key, acknowledged before this returns. */
    private static void writeGroup(EventStreamWriter<String> writer, String key, String group) throws Exception {
        for (int i = 0; i < GROUP; i++) {
            writer.writeEvent(key, group + "." + i).get(30, TimeUnit.SECONDS);
        }
    }

    private static void writeGroup(Transaction<String> txn, String key, String group) throws TxnFailedException {
        for (int i = 0; i < GROUP; i++) {
            txn.writeEvent(key, group + "." + i);
        }
        txn.flush();
    }

    /** The groups in the order read, each once, after checking that each group's events are in order. */
    private static String groupOrder(List<String> read) {
        Map<String, List<Integer>> groups = new LinkedHashMap<>();
        for (String event : read) {
            int dot = event.lastIndexOf('.');
            groups.computeIfAbsent(event.substring(0, dot), g -> new ArrayList<>())
                    .add(Integer.parseInt(event.substring(dot + 1)));
        }
        for (Map.Entry<String, List<Integer>> group : groups.entrySet()) {
            equal(List.of(0, 1, 2, 3), group.getValue(), "events of group " + group.getKey() + " (read: " + read + ")");
        }
        return String.join(",", groups.keySet());
    }

    /**
     * Writes a marker per key outside the transaction and reads until every marker arrived: a
     * transaction's events merged before a marker of their key would come before it. Returns how
     * many events other than the markers were read.
     */
    private static int eventsBeforeMarkers(EventStreamWriter<String> writer, EventStreamReader<String> reader,
                                           List<String> keys) throws Exception {
        Set<String> pending = new HashSet<>();
        for (String key : keys) {
            pending.add("marker-" + key);
            writer.writeEvent(key, "marker-" + key).get(30, TimeUnit.SECONDS);
        }
        List<String> read = EventSupport.readThrough(reader, event -> pending.remove(event) && pending.isEmpty(),
                READ_WITHIN);
        return read.size() - keys.size();
    }

    /** After commit() returns the transaction is committing or committed, never open again. */
    private static void requireCommitting(List<Transaction.Status> seen) {
        require(seen.stream().allMatch(s -> s == Transaction.Status.COMMITTING || s == Transaction.Status.COMMITTED),
                "statuses after commit: " + seen);
    }

    /** The exception's class and, for a gRPC status, its code. */
    private static void observeFailure(Ctx ctx, String what, Ctx.ThrowingRunnable action) {
        try {
            action.run();
            ctx.observe(what, "none");
        } catch (Throwable e) {
            ctx.observe(what, Ctx.rootClass(e));
            Throwable cause = e;
            while (cause.getCause() != null && cause.getCause() != cause) {
                cause = cause.getCause();
            }
            if (cause instanceof io.grpc.StatusRuntimeException status) {
                ctx.observe(what + " code", status.getStatus().getCode());
            }
        }
    }
}
