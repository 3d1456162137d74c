package io.pgcontroller.conformance;

import io.grpc.StatusRuntimeException;
import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.admin.ReaderGroupManager;
import io.pravega.client.admin.StreamInfo;
import io.pravega.client.control.impl.Controller;
import io.pravega.client.control.impl.ControllerImpl;
import io.pravega.client.control.impl.ControllerImplConfig;
import io.pravega.client.stream.EventRead;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.ReaderConfig;
import io.pravega.client.stream.ReaderGroupConfig;
import io.pravega.client.stream.Stream;
import io.pravega.client.stream.StreamCut;
import io.pravega.client.stream.impl.UTF8StringSerializer;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/** What StreamChecks and ScopeChecks share: writing, reading, and looking into stream cuts. */
final class StreamManagerSupport {
    /** Long enough for a busy server on 2 cores, short enough that a hang fails the check. */
    static final long ANSWER_SECONDS = 30;

    private StreamManagerSupport() {
    }

    private static final String THREW = "threw ";

    /**
     * What {@code action} answered, or how it failed: "threw " and the class of what it threw (as
     * {@link Ctx#thrown}) and, for a gRPC error, its status code, which says more than the class.
     */
    static String answer(Callable<?> action) {
        try {
            return String.valueOf(action.call());
        } catch (Exception e) {
            String refusal = THREW + Ctx.rootClass(e);
            for (Throwable cause = e; cause != null; cause = cause.getCause()) {
                if (cause instanceof StatusRuntimeException grpc) {
                    return refusal + " " + grpc.getStatus().getCode();
                }
            }
            return refusal;
        }
    }

    /** Records what the server answered and requires what Pravega's contract says it answers. */
    static void expect(Ctx ctx, String key, Object expected, Object actual) {
        ctx.observe(key, actual);
        Ctx.equal(expected, actual, key);
    }

    /** Records how a call was refused ({@link #answer}) and requires that it was: it threw. */
    static void refused(Ctx ctx, String key, String answer) {
        ctx.observe(key, answer);
        Ctx.require(answer.startsWith(THREW), key + " was not refused: it answered " + answer);
    }

    static StreamInfo info(Ctx ctx, String scope, String stream) throws Exception {
        return ctx.streamManager().fetchStreamInfo(scope, stream).get(ANSWER_SECONDS, TimeUnit.SECONDS);
    }

    /** The offsets of a cut, by segment; the segments' ids are generated, so only their count and offsets are compared. */
    static Map<?, Long> positions(StreamCut cut) {
        return cut.asImpl().getPositions();
    }

    static long totalOffset(StreamCut cut) {
        return positions(cut).values().stream().mapToLong(Long::longValue).sum();
    }

    static EventStreamWriter<String> writer(Ctx ctx, String scope, String stream) {
        EventStreamClientFactory factory = ctx.clientFactory(scope);
        return ctx.closeLater(factory.createEventWriter(stream, new UTF8StringSerializer(), EventWriterConfig.builder().build()));
    }

    /** Writes {@code event-<from>} .. {@code event-<to - 1>}, each with its own routing key, and waits for all acks. */
    static List<String> write(EventStreamWriter<String> writer, int from, int to) throws Exception {
        List<String> events = new ArrayList<>();
        for (int i = from; i < to; i++) {
            String event = "event-" + i;
            events.add(event);
            writer.writeEvent("key-" + i, event);
        }
        writer.flush();
        return events;
    }

    /** Reads {@code count} events with a new reader group that starts at the stream's head. */
    static List<String> read(Ctx ctx, String scope, String stream, int count) throws Exception {
        ReaderGroupManager groups = ctx.readerGroupManager(scope);
        String group = ctx.unique("rg");
        groups.createReaderGroup(group, ReaderGroupConfig.builder().stream(Stream.of(scope, stream))
                .disableAutomaticCheckpoints().build());
        EventStreamReader<String> reader = ctx.closeLater(ctx.clientFactory(scope)
                .createReader(ctx.unique("reader"), group, new UTF8StringSerializer(), ReaderConfig.builder().build()));
        List<String> events = new ArrayList<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(ANSWER_SECONDS);
        while (events.size() < count && System.nanoTime() < deadline) {
            EventRead<String> read = reader.readNextEvent(1000);
            if (read.getEvent() != null) {
                events.add(read.getEvent());
            }
        }
        return events;
    }

    static <T> List<T> list(Iterator<T> iterator) {
        List<T> items = new ArrayList<>();
        iterator.forEachRemaining(items::add);
        return items;
    }

    static List<String> streamNames(Iterator<Stream> streams) {
        List<String> names = new ArrayList<>();
        streams.forEachRemaining(stream -> names.add(stream.getStreamName()));
        return names;
    }

    /**
     * The client's controller itself: StreamManager drops timestampAggregationTimeout and
     * rolloverSizeBytes from the configuration it sends, so only this reaches them.
     */
    static Controller controller(Ctx ctx) {
        ScheduledExecutorService executor = Executors.newSingleThreadScheduledExecutor();
        ctx.closeLater(executor::shutdownNow);
        return ctx.closeLater(new ControllerImpl(ControllerImplConfig.builder().clientConfig(ctx.clientConfig()).build(), executor));
    }
}
