package io.pgcontroller.conformance;

import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.admin.ReaderGroupManager;
import io.pravega.client.control.impl.ControllerImpl;
import io.pravega.client.control.impl.ControllerImplConfig;
import io.pravega.client.stream.EventRead;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.ReaderConfig;
import io.pravega.client.stream.ReaderGroup;
import io.pravega.client.stream.ReaderGroupConfig;
import io.pravega.client.stream.Serializer;
import io.pravega.client.stream.Stream;
import io.pravega.client.stream.StreamCut;
import io.pravega.client.stream.impl.UTF8StringSerializer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;

/**
 * What the reader-group and watermark checks share: events named {@code e<i>} written under a few
 * routing keys, readers that collect them, stream cuts from fetchStreamInfo, and a controller client
 * for what the public API cannot do (scaling, subscribers, writer marks).
 */
final class ReaderGroupSupport {
    static final Serializer<String> STRINGS = new UTF8StringSerializer();
    /** How long one readNextEvent may wait: long enough for a segment to be acquired. */
    static final long READ_TIMEOUT_MS = 2_000;

    private ReaderGroupSupport() {
    }

    static EventStreamWriter<String> writer(Ctx ctx, EventStreamClientFactory factory, String stream) {
        return ctx.closeLater(factory.createEventWriter(stream, STRINGS, EventWriterConfig.builder().build()));
    }

    /** Writes e{from}..e{to - 1} under eight routing keys, and waits until all are acknowledged. */
    static List<String> write(EventStreamWriter<String> writer, int from, int to) {
        List<String> written = new ArrayList<>();
        for (int i = from; i < to; i++) {
            written.add(event(i));
        }
        for (String event : written) {
            writer.writeEvent(routingKey(event), event);
        }
        writer.flush();
        return written;
    }

    static String event(int i) {
        return "e" + i;
    }

    static int index(String event) {
        return Integer.parseInt(event.substring(1));
    }

    static String routingKey(String event) {
        return "k" + index(event) % 8;
    }

    static List<String> events(int from, int to) {
        List<String> events = new ArrayList<>();
        for (int i = from; i < to; i++) {
            events.add(event(i));
        }
        return events;
    }

    /** Creates the group (it must not exist yet) and returns it, closed when the check ends. */
    static ReaderGroup group(Ctx ctx, ReaderGroupManager manager, String name, ReaderGroupConfig config) {
        require(manager.createReaderGroup(name, config), "createReaderGroup(" + name + ") answered false");
        return ctx.closeLater(manager.getReaderGroup(name));
    }

    /** A group reading {@code stream} from its head, with no automatic checkpoint to interleave. */
    static ReaderGroupConfig fromHead(String scope, String stream) {
        return ReaderGroupConfig.builder().stream(Stream.of(scope, stream)).disableAutomaticCheckpoints().build();
    }

    static EventStreamReader<String> reader(Ctx ctx, EventStreamClientFactory factory, String id, String group) {
        return ctx.closeLater(factory.createReader(id, group, STRINGS, ReaderConfig.builder().build()));
    }

    /** Reads exactly {@code count} events (skipping checkpoints); fails when they do not come. */
    static List<String> read(EventStreamReader<String> reader, int count, Duration within) {
        List<String> read = new ArrayList<>();
        long deadline = System.nanoTime() + within.toNanos();
        while (read.size() < count) {
            require(System.nanoTime() < deadline, "read " + read.size() + " of " + count + " events: " + read);
            EventRead<String> next = reader.readNextEvent(READ_TIMEOUT_MS);
            if (next.getEvent() != null) {
                read.add(next.getEvent());
            }
        }
        return read;
    }

    /** Reads until the reader says everything is read (a sealed stream or the ending cuts reached). */
    static List<String> readToEnd(EventStreamReader<String> reader, Duration within) {
        List<String> read = new ArrayList<>();
        long deadline = System.nanoTime() + within.toNanos();
        while (true) {
            require(System.nanoTime() < deadline, "no end of stream after " + read.size() + " events: " + read);
            EventRead<String> next = reader.readNextEvent(READ_TIMEOUT_MS);
            if (next.getEvent() != null) {
                read.add(next.getEvent());
            } else if (next.isReadCompleted()) {
                return read;
            }
        }
    }

    /** Every event of {@code expected} read exactly once, in any order. */
    static void requireExactlyOnce(List<String> expected, List<String> read, String what) {
        List<String> sorted = new ArrayList<>(read);
        sorted.sort((a, b) -> Integer.compare(index(a), index(b)));
        equal(expected, sorted, what + " (sorted by index)");
    }

    /** Whether events of each routing key were read in the order they were written. */
    static boolean perKeyOrderKept(List<String> read) {
        Map<String, Integer> last = new HashMap<>();
        for (String event : read) {
            Integer previous = last.put(routingKey(event), index(event));
            if (previous != null && previous > index(event)) {
                return false;
            }
        }
        return true;
    }

    static StreamCut tail(Ctx ctx, String scope, String stream) {
        return ctx.streamManager().fetchStreamInfo(scope, stream).join().getTailStreamCut();
    }

    static StreamCut head(Ctx ctx, String scope, String stream) {
        return ctx.streamManager().fetchStreamInfo(scope, stream).join().getHeadStreamCut();
    }

    static ScheduledExecutorService executor(Ctx ctx) {
        ScheduledExecutorService executor = Executors.newScheduledThreadPool(2);
        ctx.closeLater(executor::shutdownNow);
        return executor;
    }

    /** Pravega's controller client, for the RPCs the public API has no method for. */
    static ControllerImpl controller(Ctx ctx) {
        ControllerImplConfig config = ControllerImplConfig.builder().clientConfig(ctx.clientConfig()).build();
        return ctx.closeLater(new ControllerImpl(config, executor(ctx)));
    }

    /** Seals {@code sealed} and creates segments of {@code ranges}, as Pravega's integration tests do. */
    static void scale(ControllerImpl controller, Stream stream, List<Long> sealed, Map<Double, Double> ranges,
                      ScheduledExecutorService executor) {
        equal(true, controller.scaleStream(stream, sealed, ranges, executor).getFuture().join(),
                "scaleStream of " + sealed);
    }
}
