package io.pgcontroller.conformance;

import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.control.impl.Controller;
import io.pravega.client.control.impl.ControllerImpl;
import io.pravega.client.control.impl.ControllerImplConfig;
import io.pravega.client.stream.EventRead;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.ReaderConfig;
import io.pravega.client.stream.ReaderGroupConfig;
import io.pravega.client.stream.Serializer;
import io.pravega.client.stream.Stream;
import io.pravega.client.stream.StreamCut;
import io.pravega.client.stream.Transaction;
import io.pravega.client.stream.impl.UTF8StringSerializer;
import io.pravega.common.concurrent.ExecutorServiceHelpers;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import java.util.function.Supplier;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;

/**
 * What the writer and transaction checks share: a controller client of their own (to scale), a
 * reader that reads a stream from its start, and the bookkeeping of events named {@code key:seq}.
 */
final class WriterSupport {
    static final Serializer<String> STRINGS = new UTF8StringSerializer();
    private static final long CHECKPOINT_MILLIS = 300;

    private WriterSupport() {
    }

    /** A writer of strings with the default configuration, closed when the check ends. */
    static EventStreamWriter<String> writer(Ctx ctx, EventStreamClientFactory factory, String stream) {
        return ctx.closeLater(factory.createEventWriter(stream, STRINGS, EventWriterConfig.builder().build()));
    }

    /** A scheduled pool shut down when the check ends (after what is registered later). */
    static ScheduledExecutorService executor(Ctx ctx) {
        ScheduledExecutorService executor = ExecutorServiceHelpers.newScheduledThreadPool(2, "conf-writers");
        ctx.closeLater(executor::shutdownNow);
        return executor;
    }

    /**
     * A controller client of the check's own: StreamManager of 0.13 cannot scale, ControllerImpl
     * can. {@code retryAttempts} bounds how long it retries codes the client deems transient.
     */
    static Controller controller(Ctx ctx, ScheduledExecutorService executor, int retryAttempts) {
        ControllerImplConfig config = ControllerImplConfig.builder()
                .clientConfig(ctx.clientConfig())
                .retryAttempts(retryAttempts)
                .build();
        return ctx.closeLater(new ControllerImpl(config, executor));
    }

    /** Seals {@code sealed} and creates {@code newRanges} in their place, as Pravega's tests scale. */
    static void scale(Controller controller, ScheduledExecutorService executor, String scope, String stream,
                      List<Long> sealed, Map<Double, Double> newRanges) throws Exception {
        boolean done = controller.scaleStream(Stream.of(scope, stream), sealed, newRanges, executor)
                .getFuture().get(60, TimeUnit.SECONDS);
        require(done, "scaleStream of " + sealed + " into " + newRanges + " answered false");
    }

    /** The sum of the lengths of the stream's current segments, from its tail stream cut. */
    static long tailBytes(Ctx ctx, String scope, String stream) throws Exception {
        StreamCut tail = ctx.streamManager().fetchStreamInfo(scope, stream).get(30, TimeUnit.SECONDS).getTailStreamCut();
        return tail.asImpl().getPositions().values().stream().mapToLong(Long::longValue).sum();
    }

    /** A segment's id: its number in the low 32 bits, the epoch that created it in the high ones. */
    static long segmentId(int number, int epoch) {
        return ((long) epoch << 32) | number;
    }

    /** Polls the transaction until it reaches {@code wanted}; every status seen on the way is recorded. */
    static List<Transaction.Status> awaitStatus(Transaction<?> txn, Transaction.Status wanted, Duration within)
            throws Exception {
        List<Transaction.Status> seen = new ArrayList<>();
        Ctx.eventually(within, "transaction status " + wanted, () -> {
            Transaction.Status status = txn.checkStatus();
            if (seen.isEmpty() || seen.get(seen.size() - 1) != status) {
                seen.add(status);
            }
            return status == wanted;
        });
        return seen;
    }

    /**
     * A reader of a new reader group on {@code stream}, positioned at the stream's start. A 0.13
     * reader hands a sealed segment over to its successors only right after a checkpoint, so the
     * group checkpoints itself often: without that a reader stops at the first scale.
     */
    static <T> Reader<T> reader(Ctx ctx, EventStreamClientFactory factory, String scope, String stream,
                                Serializer<T> serializer) {
        String group = ctx.unique("rg");
        ReaderGroupConfig config = ReaderGroupConfig.builder()
                .stream(Stream.of(scope, stream))
                .automaticCheckpointIntervalMillis(CHECKPOINT_MILLIS)
                .build();
        require(ctx.readerGroupManager(scope).createReaderGroup(group, config), "createReaderGroup answered false");
        EventStreamReader<T> reader = factory.createReader(ctx.unique("r"), group, serializer,
                ReaderConfig.builder().build());
        return new Reader<>(ctx.closeLater(reader));
    }

    static Reader<String> reader(Ctx ctx, EventStreamClientFactory factory, String scope, String stream) {
        return reader(ctx, factory, scope, stream, STRINGS);
    }

    /** Reads on from where it stopped. */
    static final class Reader<T> {
        private final EventStreamReader<T> reader;

        Reader(EventStreamReader<T> reader) {
            this.reader = reader;
        }

        /** The next {@code count} events; an error when they have not all come within {@code within}. */
        List<T> read(int count, Duration within) throws Exception {
            List<T> events = new ArrayList<>();
            if (count == 0) {
                return events;
            }
            readWhile(within, event -> {
                events.add(event);
                return events.size() < count;
            }, () -> "reading " + count + " events (got " + events.size() + ": " + events + ")");
            return events;
        }

        /** Events up to and including the first that {@code last} accepts. */
        List<T> readThrough(Predicate<T> last, Duration within) throws Exception {
            List<T> events = new ArrayList<>();
            readWhile(within, event -> {
                events.add(event);
                return !last.test(event);
            }, () -> "reading up to a marker (got " + events + ")");
            return events;
        }

        /** Whatever arrives within {@code wait}: used to show that nothing more is there. */
        List<T> readRemaining(Duration wait) throws Exception {
            List<T> events = new ArrayList<>();
            long deadline = System.nanoTime() + wait.toNanos();
            while (System.nanoTime() < deadline) {
                EventRead<T> read = reader.readNextEvent(Math.max(1, (deadline - System.nanoTime()) / 1_000_000));
                if (read.getEvent() != null) {
                    events.add(read.getEvent());
                }
            }
            return events;
        }

        private void readWhile(Duration within, Predicate<T> more, Supplier<String> what) throws Exception {
            long deadline = System.nanoTime() + within.toNanos();
            while (true) {
                long left = (deadline - System.nanoTime()) / 1_000_000;
                if (left <= 0) {
                    throw new AssertionError(what.get() + ": not within " + within.toSeconds() + " s");
                }
                EventRead<T> read = reader.readNextEvent(Math.min(left, 1000));
                if (read.getEvent() != null && !more.test(read.getEvent())) {
                    return;
                }
            }
        }
    }

    /** Events named {@code key:seq}, grouped by key in the order read. */
    static Map<String, List<Integer>> byKey(List<String> events) {
        Map<String, List<Integer>> grouped = new LinkedHashMap<>();
        for (String event : events) {
            int colon = event.lastIndexOf(':');
            grouped.computeIfAbsent(event.substring(0, colon), key -> new ArrayList<>())
                    .add(Integer.parseInt(event.substring(colon + 1)));
        }
        return grouped;
    }

    /** Every key's sequence numbers were read as 0, 1, 2, ... {@code perKey}-1: in order, none lost or repeated. */
    static void requireInOrder(List<String> events, List<String> keys, int perKey) {
        Map<String, List<Integer>> grouped = byKey(events);
        equal(keys.size(), grouped.size(), "keys read (" + grouped.keySet() + ")");
        List<Integer> expected = new ArrayList<>();
        for (int i = 0; i < perKey; i++) {
            expected.add(i);
        }
        for (String key : keys) {
            equal(expected, grouped.get(key), "sequence read for key " + key);
        }
    }
}
