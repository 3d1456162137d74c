package io.pgcontroller.conformance;

import io.pravega.client.KeyValueTableFactory;
import io.pravega.client.admin.KeyValueTableInfo;
import io.pravega.client.admin.KeyValueTableManager;
import io.pravega.client.tables.IteratorItem;
import io.pravega.client.tables.KeyValueTable;
import io.pravega.client.tables.KeyValueTableClientConfiguration;
import io.pravega.client.tables.KeyValueTableConfiguration;
import io.pravega.client.tables.TableEntry;
import io.pravega.client.tables.TableKey;
import io.pravega.common.util.AsyncIterator;
import io.grpc.StatusRuntimeException;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.Callable;

import static io.pgcontroller.conformance.Ctx.require;

/**
 * What {@link KeyValueTableChecks} share: tables made and opened for a check, keys of fixed length
 * (a primary key is a big-endian long, a secondary key a big-endian int, so their byte order is their
 * numeric order for non-negative numbers), text values, and iterators read to the end page by page.
 */
final class KvtSupport {
    static final int PRIMARY_KEY_LENGTH = Long.BYTES;
    static final int SECONDARY_KEY_LENGTH = Integer.BYTES;

    private KvtSupport() {
    }

    static KeyValueTableConfiguration config(int partitions, int secondaryKeyLength) {
        return KeyValueTableConfiguration.builder()
                .partitionCount(partitions)
                .primaryKeyLength(PRIMARY_KEY_LENGTH)
                .secondaryKeyLength(secondaryKeyLength)
                .build();
    }

    static KeyValueTableManager manager(Ctx ctx) {
        return ctx.closeLater(KeyValueTableManager.create(ctx.clientConfig()));
    }

    /** A new table in {@code scope}, created through a manager of its own. */
    static String newTable(Ctx ctx, String scope, KeyValueTableConfiguration config) {
        String table = ctx.unique("kvt");
        require(manager(ctx).createKeyValueTable(scope, table, config), "createKeyValueTable(" + table + ") answered false");
        return table;
    }

    static KeyValueTable open(Ctx ctx, String scope, String table) {
        return open(ctx, scope, table, KeyValueTableClientConfiguration.builder().build());
    }

    static KeyValueTable open(Ctx ctx, String scope, String table, KeyValueTableClientConfiguration config) {
        KeyValueTableFactory factory = ctx.closeLater(KeyValueTableFactory.withScope(scope, ctx.clientConfig()));
        return ctx.closeLater(factory.forKeyValueTable(table, config));
    }

    static List<String> listed(KeyValueTableManager manager, String scope) {
        List<String> names = new ArrayList<>();
        Iterator<KeyValueTableInfo> tables = manager.listKeyValueTables(scope);
        tables.forEachRemaining(info -> names.add(info.getKeyValueTableName()));
        return names;
    }

    /** What {@code action} answers, or how it fails (see {@link #failure}). */
    static String answer(Callable<?> action) {
        try {
            return String.valueOf(action.call());
        } catch (Exception e) {
            return describe(e);
        }
    }

    /**
     * "none", or the class {@code action} fails with (as {@link Ctx#thrown}), with what Ctx.thrown
     * leaves out: the gRPC status code of a controller's error reply, and the deepest cause of a
     * wrapper such as RetriesExhaustedException.
     */
    static String failure(Ctx.ThrowingRunnable action) {
        return answer(() -> {
            action.run();
            return "none";
        });
    }

    private static String describe(Throwable e) {
        StatusRuntimeException status = Ctx.find(e, StatusRuntimeException.class);
        if (status != null) {
            return "StatusRuntimeException " + status.getStatus().getCode();
        }
        String outer = Ctx.rootClass(e);
        Throwable deepest = e;
        while (deepest.getCause() != null && deepest.getCause() != deepest) {
            deepest = deepest.getCause();
        }
        String inner = deepest.getClass().getSimpleName();
        return inner.equals(outer) ? outer : outer + " <- " + inner;
    }

    static ByteBuffer pk(long number) {
        return ByteBuffer.allocate(PRIMARY_KEY_LENGTH).putLong(0, number);
    }

    static ByteBuffer sk(int number) {
        return ByteBuffer.allocate(SECONDARY_KEY_LENGTH).putInt(0, number);
    }

    static TableKey key(long primary, int secondary) {
        return new TableKey(pk(primary), sk(secondary));
    }

    static ByteBuffer value(String text) {
        return ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8));
    }

    static String text(ByteBuffer value) {
        ByteBuffer copy = value.duplicate();
        byte[] bytes = new byte[copy.remaining()];
        copy.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    /** The value of {@code entry} as text, or "null" for a missing key. */
    static String text(TableEntry entry) {
        return entry == null ? "null" : text(entry.getValue());
    }

    /** "primary/secondary" of a key made by {@link #key}, or "primary" in a table without secondary keys. */
    static String name(TableKey key) {
        ByteBuffer primary = key.getPrimaryKey();
        ByteBuffer secondary = key.getSecondaryKey();
        String name = Long.toString(primary.getLong(primary.position()));
        if (secondary != null && secondary.remaining() > 0) {
            name += "/" + secondary.getInt(secondary.position());
        }
        return name;
    }

    /** Everything an iterator returns, and how it came: the number of pages and the largest one. */
    record Pages<T>(List<T> items, int pages, int largestPage) {
    }

    static <T> Pages<T> readAll(AsyncIterator<IteratorItem<T>> iterator) {
        List<T> items = new ArrayList<>();
        int pages = 0;
        int largest = 0;
        for (IteratorItem<T> page = iterator.getNext().join(); page != null; page = iterator.getNext().join()) {
            items.addAll(page.getItems());
            pages++;
            largest = Math.max(largest, page.getItems().size());
        }
        return new Pages<>(items, pages, largest);
    }
}
