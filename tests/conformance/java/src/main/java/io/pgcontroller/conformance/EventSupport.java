package io.pgcontroller.conformance;

import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.admin.ReaderGroupManager;
import io.pravega.client.stream.EventRead;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.ReaderConfig;
import io.pravega.client.stream.ReaderGroupConfig;
import io.pravega.client.stream.Serializer;
import io.pravega.client.stream.Stream;
import io.pravega.client.stream.impl.UTF8StringSerializer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.function.IntFunction;
import java.util.function.Predicate;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;

/**
 * Writing events and reading them back, as every check of events does: events under routing keys,
 * writers of strings, reader groups of a check's own and their readers, reads that wait for a given
 * number of events (or the end of the stream), and the requirement that each event written was read
 * exactly once and each key's events in the order written.
 */
final class EventSupport {
    static final Serializer<String> STRINGS = new UTF8StringSerializer();
    /** How long a check waits for events it wrote to be read. */
    static final Duration READ_WITHIN = Duration.ofSeconds(60);
    /** How long one readNextEvent may wait: long enough for a segment to be acquired. */
    static final long READ_TIMEOUT_MS = 2_000;

    private EventSupport() {
    }

    /**
     * An event and its key: the routing key it is written under, whose events a reader returns in
     * the order written.
     */
    record Keyed(String key, String event) {
    }

    /** {@code prefix<from>} .. {@code prefix<to - 1>}. */
    static List<String> numbered(String prefix, int from, int to) {
        List<String> names = new ArrayList<>();
        for (int i = from; i < to; i++) {
            names.add(prefix + i);
        }
        return names;
    }

    /** The events {@code prefix<i>} for i in [from, to), event i under the routing key {@code routingKey(i)}. */
    static List<Keyed> numberedEvents(String prefix, int from, int to, IntFunction<String> routingKey) {
        List<Keyed> events = new ArrayList<>();
        for (int i = from; i < to; i++) {
            events.add(new Keyed(routingKey.apply(i), prefix + i));
        }
        return events;
    }

    static List<String> names(List<Keyed> events) {
        return events.stream().map(Keyed::event).toList();
    }

    /** A writer of strings with the default configuration, closed when the check ends. */
    static EventStreamWriter<String> writer(Ctx ctx, EventStreamClientFactory factory, String stream) {
        return ctx.closeLater(factory.createEventWriter(stream, STRINGS, EventWriterConfig.builder().build()));
    }

    static EventStreamWriter<String> writer(Ctx ctx, ScopedStream target) {
        return writer(ctx, target.factory(), target.name());
    }

    /** Writes {@code events} in order and answers their acknowledgements, without waiting for them. */
    static List<CompletableFuture<Void>> writeAsync(EventStreamWriter<String> writer, List<Keyed> events) {
        List<CompletableFuture<Void>> acks = new ArrayList<>();
        for (Keyed event : events) {
            acks.add(writer.writeEvent(event.key(), event.event()));
        }
        return acks;
    }

    /** Writes {@code events} in order and flushes (the segment store has them all then); answers their names. */
    static List<String> write(EventStreamWriter<String> writer, List<Keyed> events) {
        writeAsync(writer, events);
        writer.flush();
        return names(events);
    }

    /** A group reading {@code stream} from its head, with no automatic checkpoint to interleave. */
    static ReaderGroupConfig fromHead(Stream stream) {
        return ReaderGroupConfig.builder().stream(stream).disableAutomaticCheckpoints().build();
    }

    /** Creates the reader group {@code name}, which must be new: createReaderGroup answers true. */
    static void createGroup(ReaderGroupManager manager, String name, ReaderGroupConfig config) {
        require(manager.createReaderGroup(name, config), "createReaderGroup(" + name + ") answered false");
    }

    /** A reader of {@code group}, closed when the check ends. */
    static <T> EventStreamReader<T> reader(Ctx ctx, EventStreamClientFactory factory, String readerId, String group,
                                           Serializer<T> serializer) {
        return ctx.closeLater(factory.createReader(readerId, group, serializer, ReaderConfig.builder().build()));
    }

    /** The one reader of a new reader group of {@code config}. */
    static <T> EventStreamReader<T> readerOfNewGroup(Ctx ctx, ReaderGroupManager manager,
                                                     EventStreamClientFactory factory, ReaderGroupConfig config,
                                                     Serializer<T> serializer) {
        String group = ctx.unique("rg");
        createGroup(manager, group, config);
        return reader(ctx, factory, ctx.unique("r"), group, serializer);
    }

    static EventStreamReader<String> readerOfNewGroup(Ctx ctx, ScopedStream target, ReaderGroupConfig config) {
        return readerOfNewGroup(ctx, ctx.readerGroupManager(target.scope()), target.factory(), config, STRINGS);
    }

    /** The next {@code count} events, or fewer: those that came within {@code within}. */
    static <T> List<T> readUpTo(EventStreamReader<T> reader, int count, Duration within) {
        List<T> read = new ArrayList<>();
        if (count > 0) {
            readUntil(reader, within, read, next -> read.size() >= count);
        }
        return read;
    }

    /** The next {@code count} events; the check fails when they have not all come within {@code within}. */
    static <T> List<T> readExactly(EventStreamReader<T> reader, int count, Duration within) {
        List<T> read = readUpTo(reader, count, within);
        if (read.size() < count) {
            throw new AssertionError("read " + read.size() + " of " + count + " events: " + read
                    + ": not within " + within.toSeconds() + " s");
        }
        return read;
    }

    /** Reads as many events as were written and requires each written event among them exactly once. */
    static List<String> readEachOnce(EventStreamReader<String> reader, List<Keyed> written, String what) {
        List<String> read = readExactly(reader, written.size(), READ_WITHIN);
        requireExactlyOnce(written, read, what);
        return read;
    }

    /** As {@link #readEachOnce}, and requires each key's events in the order written. */
    static List<String> readEachOnceInKeyOrder(EventStreamReader<String> reader, List<Keyed> written) {
        List<String> read = readEachOnce(reader, written, "events read");
        require(perKeyOrderKept(written, read), "a key's events read out of the order written: " + read);
        return read;
    }

    /** Events up to and including the first that {@code last} accepts, which must come within {@code within}. */
    static <T> List<T> readThrough(EventStreamReader<T> reader, Predicate<T> last, Duration within) {
        List<T> read = new ArrayList<>();
        boolean found = readUntil(reader, within, read, next -> next.getEvent() != null && last.test(next.getEvent()));
        require(found, "reading up to a marker (got " + read + "): not within " + within.toSeconds() + " s");
        return read;
    }

    /** Whatever arrives within {@code wait}: used to show that nothing more is there. */
    static <T> List<T> readRemaining(EventStreamReader<T> reader, Duration wait) {
        List<T> read = new ArrayList<>();
        readUntil(reader, wait, read, next -> false);
        return read;
    }

    /** Reads until the reader says everything is read (a sealed stream or the ending cuts reached). */
    static <T> List<T> readToEnd(EventStreamReader<T> reader, Duration within) {
        List<T> read = new ArrayList<>();
        boolean ended = readUntil(reader, within, read, next -> next.getEvent() == null && next.isReadCompleted());
        require(ended, "no end of stream after " + read.size() + " events: " + read);
        return read;
    }

    /**
     * Adds the events read to {@code read} (checkpoints and empty reads are no events) until
     * {@code done} accepts a read or {@code within} passes; answers whether {@code done} accepted one.
     */
    private static <T> boolean readUntil(EventStreamReader<T> reader, Duration within, List<T> read,
                                         Predicate<EventRead<T>> done) {
        long deadline = System.nanoTime() + within.toNanos();
        while (true) {
            long left = (deadline - System.nanoTime()) / 1_000_000;
            if (left <= 0) {
                return false;
            }
            EventRead<T> next = reader.readNextEvent(Math.min(left, READ_TIMEOUT_MS));
            if (next.getEvent() != null) {
                read.add(next.getEvent());
            }
            if (done.test(next)) {
                return true;
            }
        }
    }

    /** Every event of {@code written} read exactly once, in any order. */
    static void requireExactlyOnce(List<Keyed> written, List<String> read, String what) {
        Map<String, Integer> position = positions(written);
        List<String> sorted = new ArrayList<>(read);
        sorted.sort(Comparator.comparingInt(event -> position.getOrDefault(event, -1)));
        equal(names(written), sorted, what + " (in the order written)");
    }

    /** Whether each key's events were read in the order written (events not written have no order to keep). */
    static boolean perKeyOrderKept(List<Keyed> written, List<String> read) {
        Map<String, Integer> position = positions(written);
        Map<String, String> keyOf = new HashMap<>();
        written.forEach(event -> keyOf.put(event.event(), event.key()));
        Map<String, Integer> lastOfKey = new HashMap<>();
        for (String event : read) {
            Integer at = position.get(event);
            if (at == null) {
                continue;
            }
            Integer previous = lastOfKey.put(keyOf.get(event), at);
            if (previous != null && previous > at) {
                return false;
            }
        }
        return true;
    }

    private static Map<String, Integer> positions(List<Keyed> events) {
        Map<String, Integer> position = new HashMap<>();
        for (int i = 0; i < events.size(); i++) {
            position.put(events.get(i).event(), i);
        }
        return position;
    }
}
