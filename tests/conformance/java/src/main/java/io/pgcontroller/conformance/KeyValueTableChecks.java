package io.pgcontroller.conformance;

import io.pravega.client.admin.KeyValueTableManager;
import io.pravega.client.control.impl.ControllerImpl;
import io.pravega.client.tables.ConditionalTableUpdateException;
import io.pravega.client.tables.Insert;
import io.pravega.client.tables.KeyValueTable;
import io.pravega.client.tables.KeyValueTableClientConfiguration;
import io.pravega.client.tables.KeyValueTableConfiguration;
import io.pravega.client.tables.KeyValueTableIterator;
import io.pravega.client.tables.Put;
import io.pravega.client.tables.Remove;
import io.pravega.client.tables.TableEntry;
import io.pravega.client.tables.TableKey;
import io.pravega.client.tables.TableModification;
import io.pravega.client.tables.Version;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.Function;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;
import static io.pgcontroller.conformance.KvtSupport.config;
import static io.pgcontroller.conformance.KvtSupport.key;
import static io.pgcontroller.conformance.KvtSupport.name;
import static io.pgcontroller.conformance.KvtSupport.newTable;
import static io.pgcontroller.conformance.KvtSupport.open;
import static io.pgcontroller.conformance.KvtSupport.pk;
import static io.pgcontroller.conformance.KvtSupport.readAll;
import static io.pgcontroller.conformance.KvtSupport.sk;
import static io.pgcontroller.conformance.KvtSupport.text;
import static io.pgcontroller.conformance.KvtSupport.value;

/**
 * Key-value tables: KeyValueTableManager's create, list and delete and the controller's
 * configuration of a table; KeyValueTable's reads, conditional and unconditional inserts, updates
 * and removals, atomic batches of one primary key, secondary keys, key and entry iterators (all,
 * by primary key, by range, by prefix, in small pages), a table of 2,000 entries iterated whole,
 * and the refusals the client makes itself (keys of the wrong length, mixed batches).
 */
public class KeyValueTableChecks {
    /**
     * The page size of an iterator over one partition (one primary key): the client passes the
     * segment store's pages on as they come, and Pravega's segment store takes maxIterationSize as
     * a suggestion (it adds whole pages of its attribute index, 12 keys where 5 were asked). Only
     * iterators over several partitions, which the client merges itself, bound their pages.
     */
    private static final int ANY_PAGES = 0;

    // ---- KeyValueTableManager and the controller ----

    @Check
    public void createTwiceAnswersFalseTheSecondTimeAndListsTheTableOnce(Ctx ctx) {
        String scope = ctx.newScope();
        KeyValueTableManager manager = KvtSupport.manager(ctx);
        String table = ctx.unique("kvt");
        KeyValueTableConfiguration config = config(2, KvtSupport.SECONDARY_KEY_LENGTH);
        ctx.observe("first create", manager.createKeyValueTable(scope, table, config));
        ctx.observe("second create", manager.createKeyValueTable(scope, table, config));
        String other = newTable(ctx, scope, config(1, 0));
        List<String> listed = KvtSupport.listed(manager, scope);
        ctx.observe("listed", listed.size());
        equal(Set.of(table, other), new HashSet<>(listed), "listKeyValueTables of the scope");
        equal(2, listed.size(), "tables listed once each");
    }

    @Check
    public void configurationRoundTrips(Ctx ctx) {
        String scope = ctx.newScope();
        String table = newTable(ctx, scope, config(3, KvtSupport.SECONDARY_KEY_LENGTH));
        // getKeyValueTableConfiguration is not on the manager in 0.13, only on the controller client.
        ControllerImpl controller = ControllerSupport.controller(ctx);
        KeyValueTableConfiguration read = controller.getKeyValueTableConfiguration(scope, table).join();
        ctx.observe("partitions", read.getPartitionCount());
        ctx.observe("primary key length", read.getPrimaryKeyLength());
        ctx.observe("secondary key length", read.getSecondaryKeyLength());
        ctx.observe("rollover", read.getRolloverSizeBytes());
        equal(config(3, KvtSupport.SECONDARY_KEY_LENGTH), read, "getKeyValueTableConfiguration");
        equal(3, controller.getCurrentSegmentsForKeyValueTable(scope, table).join().getSegments().size(),
                "segments of a 3-partition table");
        ctx.observe("configuration of a missing table",
                Ctx.thrown(() -> controller.getKeyValueTableConfiguration(scope, ctx.unique("absent")).join()));
    }

    /**
     * The rollover size a table was created with, as getKeyValueTableConfiguration answers it.
     * Pravega 0.13 hands it to the segment store but does not keep it in the table's configuration
     * record (KVTConfigurationRecord writes partitions and key lengths only), so it answers 0.
     */
    @Check
    public void configurationKeepsTheRolloverSize(Ctx ctx) {
        String scope = ctx.newScope();
        long rollover = 1024 * 1024;
        KeyValueTableConfiguration config = KeyValueTableConfiguration.builder().partitionCount(1)
                .primaryKeyLength(KvtSupport.PRIMARY_KEY_LENGTH).rolloverSizeBytes(rollover).build();
        String table = newTable(ctx, scope, config);
        KeyValueTableConfiguration read = ControllerSupport.controller(ctx).getKeyValueTableConfiguration(scope, table).join();
        ctx.observe("rollover", read.getRolloverSizeBytes());
        equal(rollover, read.getRolloverSizeBytes(), "rolloverSizeBytes read back");
    }

    @Check
    public void deleteRemovesTheTableAndASecondDeleteAnswersFalse(Ctx ctx) {
        String scope = ctx.newScope();
        KeyValueTableManager manager = KvtSupport.manager(ctx);
        KeyValueTableConfiguration config = config(2, KvtSupport.SECONDARY_KEY_LENGTH);
        String table = newTable(ctx, scope, config);
        // One attempt only: the table client retries a lost segment for about 100 s otherwise.
        KeyValueTable kvt = open(ctx, scope, table, KeyValueTableClientConfiguration.builder().retryAttempts(1).build());
        kvt.update(new Put(key(1, 1), value("before delete"))).join();

        ctx.observe("delete", manager.deleteKeyValueTable(scope, table));
        ctx.observe("listed after delete", KvtSupport.listed(manager, scope).contains(table));
        ctx.observe("delete again", manager.deleteKeyValueTable(scope, table));
        ctx.observe("delete of a never created table", manager.deleteKeyValueTable(scope, ctx.unique("absent")));
        ControllerImpl controller = ControllerSupport.controller(ctx);
        ctx.observe("configuration after delete",
                Ctx.thrown(() -> controller.getKeyValueTableConfiguration(scope, table).join()));
        ctx.observe("open after delete", KvtSupport.failure(() -> open(ctx, scope, table)));
        ctx.observe("get through a client opened before", KvtSupport.failure(() -> kvt.get(key(1, 1)).join()));
        ctx.observe("put through a client opened before",
                KvtSupport.failure(() -> kvt.update(new Put(key(1, 1), value("x"))).join()));

        // The name is free again, and the new table does not see the old one's entries.
        ctx.observe("create again", manager.createKeyValueTable(scope, table, config));
        ctx.observe("old entry in the new table", text(open(ctx, scope, table).get(key(1, 1)).join()));
    }

    @Check
    public void createInAMissingScopeIsRefused(Ctx ctx) {
        KeyValueTableManager manager = KvtSupport.manager(ctx);
        String scope = ctx.unique("absent");
        ctx.observe("create", Ctx.thrown(() -> manager.createKeyValueTable(scope, ctx.unique("kvt"), config(1, 0))));
        ctx.observe("list", Ctx.thrown(() -> KvtSupport.listed(manager, scope)));
        ctx.observe("delete", KvtSupport.answer(() -> manager.deleteKeyValueTable(scope, ctx.unique("kvt"))));
    }

    // ---- reads and single-key updates ----

    @Check
    public void getOfMissingKeysAnswersNull(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 3, KvtSupport.SECONDARY_KEY_LENGTH);
        kvt.update(new Put(key(1, 1), value("present"))).join();
        ctx.observe("get missing", text(kvt.get(key(1, 2)).join()));
        List<TableEntry> all = kvt.getAll(List.of(key(2, 1), key(1, 1), key(3, 3))).join();
        ctx.observe("getAll", texts(all));
        ctx.observe("exists missing", kvt.exists(key(2, 1)).join());
        ctx.observe("exists present", kvt.exists(key(1, 1)).join());
        ctx.observe("getAll of nothing", kvt.getAll(List.of()).join().size());
    }

    @Check
    public void insertOfAnExistingKeyFailsAndKeepsTheFirstValue(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 2, KvtSupport.SECONDARY_KEY_LENGTH);
        Version inserted = kvt.update(new Insert(key(7, 1), value("first"))).join();
        ctx.observe("second insert", Ctx.thrown(() -> kvt.update(new Insert(key(7, 1), value("second"))).join()));
        ctx.observe("put conditioned on not existing",
                Ctx.thrown(() -> kvt.update(new Put(key(7, 1), value("third"), Version.NOT_EXISTS)).join()));
        TableEntry entry = kvt.get(key(7, 1)).join();
        ctx.observe("value", text(entry));
        equal(inserted, entry.getVersion(), "the version get answers is the one insert answered");
    }

    @Check
    public void putIsUnconditional(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 2, KvtSupport.SECONDARY_KEY_LENGTH);
        Version created = kvt.update(new Put(key(5, 5), value("one"))).join();
        Version replaced = kvt.update(new Put(key(5, 5), value("two"))).join();
        ctx.observe("versions differ", !created.equals(replaced));
        TableEntry entry = kvt.get(key(5, 5)).join();
        ctx.observe("value", text(entry));
        equal(replaced, entry.getVersion(), "the version of the last put");
        Version unconditional = kvt.update(new Put(key(5, 5), value("three"), Version.NO_VERSION)).join();
        equal(unconditional, kvt.get(key(5, 5)).join().getVersion(), "a put with NO_VERSION applies");
    }

    @Check
    public void conditionalPutNeedsTheCurrentVersion(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 2, KvtSupport.SECONDARY_KEY_LENGTH);
        Version first = kvt.update(new Insert(key(3, 1), value("v1"))).join();
        Version second = kvt.update(new Put(key(3, 1), value("v2"), first)).join();
        ctx.observe("stale version", Ctx.thrown(() -> kvt.update(new Put(key(3, 1), value("v3"), first)).join()));
        ctx.observe("value after the stale put", text(kvt.get(key(3, 1)).join()));
        equal(second, kvt.get(key(3, 1)).join().getVersion(), "the stale put changed nothing");
        Version third = kvt.update(new Put(key(3, 1), value("v3"), second)).join();
        ctx.observe("value after the current put", text(kvt.get(key(3, 1)).join()));
        require(!third.equals(second), "a conditional put answers a new version");
    }

    @Check
    public void removeWithAndWithoutVersion(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 2, KvtSupport.SECONDARY_KEY_LENGTH);
        Version old = kvt.update(new Put(key(9, 1), value("a"))).join();
        Version current = kvt.update(new Put(key(9, 1), value("b"))).join();
        kvt.update(new Put(key(9, 2), value("c"))).join();

        ctx.observe("remove with a stale version", Ctx.thrown(() -> kvt.update(new Remove(key(9, 1), old)).join()));
        ctx.observe("after the stale remove", text(kvt.get(key(9, 1)).join()));
        ctx.observe("remove with the current version", Ctx.thrown(() -> kvt.update(new Remove(key(9, 1), current)).join()));
        ctx.observe("after the current remove", text(kvt.get(key(9, 1)).join()));
        ctx.observe("unconditional remove", Ctx.thrown(() -> kvt.update(new Remove(key(9, 2))).join()));
        ctx.observe("after the unconditional remove", text(kvt.get(key(9, 2)).join()));
        ctx.observe("unconditional remove of a missing key", Ctx.thrown(() -> kvt.update(new Remove(key(9, 3))).join()));
        ctx.observe("insert after remove", Ctx.thrown(() -> kvt.update(new Insert(key(9, 1), value("d"))).join()));
        ctx.observe("value after insert", text(kvt.get(key(9, 1)).join()));
    }

    /**
     * A condition on a version (not NOT_EXISTS) of a key that is not there. KeyValueTable's javadoc
     * names NoSuchKeyException for it, but Pravega's fixed-key-length table segments (a key-value
     * table's) compare the version with the absent key's null attribute value and answer
     * TableKeyBadVersion, which the client turns into BadKeyVersionException.
     */
    @Check
    public void conditionOnAMissingKeyFailsWithBadKeyVersion(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 2, KvtSupport.SECONDARY_KEY_LENGTH);
        // Versions of keys under the same primary key: the same segment, so the client lets them pass.
        Version other = kvt.update(new Put(key(3, 1), value("other"))).join();
        Version removed = kvt.update(new Put(key(3, 2), value("removed"))).join();
        kvt.update(new Remove(key(3, 2))).join();

        ctx.observe("put on a never written key", conditionalFailure(() -> kvt.update(new Put(key(3, 3), value("x"), other)).join()));
        ctx.observe("put on a removed key", conditionalFailure(() -> kvt.update(new Put(key(3, 2), value("x"), removed)).join()));
        ctx.observe("remove of a never written key", conditionalFailure(() -> kvt.update(new Remove(key(3, 3), other)).join()));
        ctx.observe("remove of a removed key", conditionalFailure(() -> kvt.update(new Remove(key(3, 2), removed)).join()));
        ctx.observe("batch with a removed key", conditionalFailure(() -> kvt.update(List.of(
                new Put(key(3, 1), value("y"), other), new Put(key(3, 2), value("y"), removed))).join()));
        ctx.observe("after the failures", texts(kvt.getAll(List.of(key(3, 1), key(3, 2), key(3, 3))).join()));
    }

    // ---- batches and secondary keys ----

    @Check
    public void batchOfOnePrimaryKeyIsAtomic(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 3, KvtSupport.SECONDARY_KEY_LENGTH);
        List<TableKey> keys = List.of(key(4, 1), key(4, 2), key(4, 3), key(4, 4), key(4, 5));
        List<Version> inserted = kvt.update(modifications(keys, k -> new Insert(k, value("i" + name(k))))).join();
        equal(keys.size(), inserted.size(), "versions of a batch insert");

        // One stale condition among five: nothing of the batch applies.
        List<TableModification> oneStale = new ArrayList<>();
        for (int i = 0; i < keys.size(); i++) {
            oneStale.add(new Put(keys.get(i), value("u" + name(keys.get(i))), inserted.get(i)));
        }
        kvt.update(new Put(keys.get(2), value("moved on"))).join();
        ctx.observe("batch with a stale version", Ctx.thrown(() -> kvt.update(oneStale).join()));
        ctx.observe("after the failed batch", texts(kvt.getAll(keys).join()));

        // An insert of an existing key fails a batch of otherwise new keys too.
        List<TableKey> withExisting = List.of(key(4, 6), key(4, 1), key(4, 7));
        ctx.observe("batch insert with an existing key",
                Ctx.thrown(() -> kvt.update(modifications(withExisting, k -> new Insert(k, value("n")))).join()));
        ctx.observe("new keys of the failed batch", texts(kvt.getAll(List.of(key(4, 6), key(4, 7))).join()));

        List<Version> current = versions(kvt.getAll(keys).join());
        List<TableModification> removals = new ArrayList<>();
        for (int i = 0; i < keys.size(); i++) {
            removals.add(new Remove(keys.get(i), i == 0 ? inserted.get(1) : current.get(i)));
        }
        ctx.observe("batch remove with a wrong version", Ctx.thrown(() -> kvt.update(removals).join()));
        ctx.observe("after the failed removal", texts(kvt.getAll(keys).join()));

        List<TableModification> mixed = new ArrayList<>();
        mixed.add(new Put(keys.get(0), value("put"), current.get(0)));
        mixed.add(new Insert(key(4, 8), value("insert")));
        mixed.add(new Put(keys.get(1), value("put")));
        ctx.observe("mixed batch", kvt.update(mixed).join().size());
        ctx.observe("after the mixed batch", texts(kvt.getAll(List.of(keys.get(0), key(4, 8), keys.get(1))).join()));

        ctx.observe("batch remove", kvt.update(modifications(keys, Remove::new)).join().size());
        ctx.observe("after the batch remove", texts(kvt.getAll(keys).join()));
    }

    @Check
    public void secondaryKeysKeepEntriesApart(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 4, KvtSupport.SECONDARY_KEY_LENGTH);
        List<TableKey> keys = new ArrayList<>();
        for (long primary = 1; primary <= 3; primary++) {
            List<TableKey> group = new ArrayList<>();
            for (int secondary = 1; secondary <= 4; secondary++) {
                group.add(key(primary, secondary));
            }
            kvt.update(modifications(group, k -> new Insert(k, value(name(k))))).join();
            keys.addAll(group);
        }
        List<TableEntry> entries = kvt.getAll(keys).join();
        for (int i = 0; i < keys.size(); i++) {
            equal(name(keys.get(i)), text(entries.get(i)), "value of " + name(keys.get(i)));
            equal(name(keys.get(i)), name(entries.get(i).getKey()), "key of entry " + i);
        }
        kvt.update(new Remove(key(2, 3))).join();
        ctx.observe("after removing 2/3", texts(kvt.getAll(List.of(key(1, 3), key(2, 3), key(3, 3), key(2, 2))).join()));
    }

    // ---- iterators ----

    @Check
    public void tableIteratorsAreSortedAndPaged(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 4, KvtSupport.SECONDARY_KEY_LENGTH);
        ctx.observe("all of an empty table", readAll(kvt.iterator().all().keys()).items().size());
        // Primary keys in two groups by their first bytes (0x0100... and 0x0200...), eight each.
        List<TableKey> expected = new ArrayList<>();
        for (long group = 1; group <= 2; group++) {
            for (long member = 0; member < 8; member++) {
                long primary = (group << 56) | member;
                List<TableKey> keys = new ArrayList<>();
                for (int secondary = 0; secondary < 5; secondary++) {
                    keys.add(key(primary, secondary));
                }
                kvt.update(modifications(keys, k -> new Insert(k, value("v" + name(k))))).join();
                expected.addAll(keys);
            }
        }
        List<String> names = expected.stream().map(KvtSupport::name).toList();
        Function<Integer, KeyValueTableIterator.Builder> paged = size -> kvt.iterator().maxIterationSize(size);

        ctx.observe("all", checkKeys(names, paged.apply(7).all(), 7));
        ctx.observe("all entries", checkEntries(kvt, names, paged.apply(7).all(), 7));
        long firstOfSecondGroup = 2L << 56;
        List<String> range = names.subList(3 * 5, 10 * 5);
        ByteBuffer from = pk((1L << 56) | 3);
        ctx.observe("range", checkKeys(range, paged.apply(4).forRange(from, pk(firstOfSecondGroup | 1)), 4));
        ctx.observe("range entries", checkEntries(kvt, range, paged.apply(4).forRange(from, pk(firstOfSecondGroup | 1)), 4));
        ctx.observe("range from the start", checkKeys(names.subList(0, 5), paged.apply(3).forRange(null, pk(0x0100000000000000L)), 3));
        ctx.observe("range to the end", checkKeys(names.subList(75, 80), paged.apply(3).forRange(pk(firstOfSecondGroup | 7), null), 3));
        ctx.observe("range between keys", checkKeys(List.of(), paged.apply(3).forRange(pk(100), pk(200)), 3));
        ByteBuffer secondGroupPrefix = ByteBuffer.wrap(new byte[] {2});
        ctx.observe("prefix", checkKeys(names.subList(40, 80), paged.apply(6).forPrefix(secondGroupPrefix), 6));
        ctx.observe("prefix entries", checkEntries(kvt, names.subList(40, 80), paged.apply(6).forPrefix(secondGroupPrefix), 6));
        ctx.observe("prefix of nothing", checkKeys(List.of(), paged.apply(6).forPrefix(ByteBuffer.wrap(new byte[] {3})), 6));
        ctx.observe("null prefix", checkKeys(names, paged.apply(50).forPrefix(null), 50));
    }

    @Check
    public void primaryKeyIteratorsSelectSecondaryKeys(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 3, KvtSupport.SECONDARY_KEY_LENGTH);
        // Secondary keys in two groups by their first byte (0x01... and 0x02...), six each, under three primary keys.
        for (long primary = 1; primary <= 3; primary++) {
            List<TableKey> keys = new ArrayList<>();
            for (int group = 1; group <= 2; group++) {
                for (int member = 0; member < 6; member++) {
                    keys.add(key(primary, (group << 24) | member));
                }
            }
            kvt.update(modifications(keys, k -> new Put(k, value("v" + name(k))))).join();
        }
        List<String> secondPrimary = new ArrayList<>();
        for (int group = 1; group <= 2; group++) {
            for (int member = 0; member < 6; member++) {
                secondPrimary.add(name(key(2, (group << 24) | member)));
            }
        }
        Function<Integer, KeyValueTableIterator.Builder> paged = size -> kvt.iterator().maxIterationSize(size);
        ctx.observe("primary key", checkKeys(secondPrimary, paged.apply(5).forPrimaryKey(pk(2)), ANY_PAGES));
        ctx.observe("primary key entries", checkEntries(kvt, secondPrimary, paged.apply(5).forPrimaryKey(pk(2)), ANY_PAGES));
        ctx.observe("secondary range", checkKeys(secondPrimary.subList(3, 9),
                paged.apply(2).forPrimaryKey(pk(2), sk((1 << 24) | 3), sk((2 << 24) | 2)), ANY_PAGES));
        ctx.observe("secondary range from the start", checkKeys(secondPrimary.subList(0, 2),
                paged.apply(2).forPrimaryKey(pk(2), null, sk(1 << 24 | 1)), ANY_PAGES));
        ctx.observe("secondary prefix", checkKeys(secondPrimary.subList(6, 12),
                paged.apply(4).forPrimaryKey(pk(2), ByteBuffer.wrap(new byte[] {2})), ANY_PAGES));
        ctx.observe("secondary prefix entries", checkEntries(kvt, secondPrimary.subList(6, 12),
                paged.apply(4).forPrimaryKey(pk(2), ByteBuffer.wrap(new byte[] {2})), ANY_PAGES));
        ctx.observe("secondary prefix of nothing", checkKeys(List.of(),
                paged.apply(4).forPrimaryKey(pk(2), ByteBuffer.wrap(new byte[] {3})), ANY_PAGES));
        ctx.observe("missing primary key", checkKeys(List.of(), paged.apply(4).forPrimaryKey(pk(4)), ANY_PAGES));
    }

    @Check
    public void manyEntriesAreIteratedExactlyOnce(Ctx ctx) {
        int primaries = 100;
        int secondaries = 20;
        KeyValueTable kvt = newOpenTable(ctx, 8, KvtSupport.SECONDARY_KEY_LENGTH);
        // One atomic batch per primary key, all batches at once (they go to different segments).
        List<CompletableFuture<List<Version>>> batches = new ArrayList<>();
        for (long primary = 0; primary < primaries; primary++) {
            List<TableKey> keys = new ArrayList<>();
            for (int secondary = 0; secondary < secondaries; secondary++) {
                keys.add(key(primary * 7919, secondary));
            }
            batches.add(kvt.update(modifications(keys, k -> new Insert(k, value("v" + name(k))))));
        }
        batches.forEach(CompletableFuture::join);

        KvtSupport.Pages<TableEntry> entries = readAll(kvt.iterator().maxIterationSize(97).all().entries());
        Map<String, Integer> seen = new HashMap<>();
        for (TableEntry entry : entries.items()) {
            String name = name(entry.getKey());
            seen.merge(name, 1, Integer::sum);
            equal("v" + name, text(entry), "value of " + name);
        }
        ctx.observe("entries", entries.items().size());
        ctx.observe("distinct entries", seen.size());
        equal(primaries * secondaries, seen.size(), "distinct entries iterated");
        require(seen.values().stream().allMatch(count -> count == 1), "an entry iterated twice");
        require(entries.largestPage() <= 97, "a page larger than maxIterationSize: " + entries.largestPage());
        ctx.observe("keys", readAll(kvt.iterator().maxIterationSize(500).all().keys()).items().size());
    }

    // ---- what the client refuses itself ----

    @Check
    public void keysOfTheWrongLengthAreRefusedByTheClient(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 2, KvtSupport.SECONDARY_KEY_LENGTH);
        ByteBuffer shortPrimary = ByteBuffer.allocate(KvtSupport.PRIMARY_KEY_LENGTH - 1);
        ByteBuffer longSecondary = ByteBuffer.allocate(KvtSupport.SECONDARY_KEY_LENGTH + 1);
        ctx.observe("put short primary key",
                Ctx.thrown(() -> kvt.update(new Put(new TableKey(shortPrimary, sk(1)), value("x"))).join()));
        ctx.observe("put long secondary key",
                Ctx.thrown(() -> kvt.update(new Put(new TableKey(pk(1), longSecondary), value("x"))).join()));
        ctx.observe("put without secondary key",
                Ctx.thrown(() -> kvt.update(new Put(new TableKey(pk(1)), value("x"))).join()));
        ctx.observe("get short primary key", Ctx.thrown(() -> kvt.get(new TableKey(shortPrimary, sk(1))).join()));
        ctx.observe("remove long secondary key",
                Ctx.thrown(() -> kvt.update(new Remove(new TableKey(pk(1), longSecondary))).join()));
        ctx.observe("value too long", Ctx.thrown(() -> kvt.update(new Put(key(1, 1),
                ByteBuffer.allocate(KeyValueTable.MAXIMUM_VALUE_LENGTH + 1))).join()));
        ctx.observe("batch of two primary keys", Ctx.thrown(() -> kvt.update(List.of(
                new Put(key(1, 1), value("x")), new Put(key(2, 1), value("x")))).join()));
        ctx.observe("batch mixing put and remove", Ctx.thrown(() -> kvt.update(List.of(
                new Put(key(1, 1), value("x")), new Remove(key(1, 2)))).join()));
        ctx.observe("iterator with a short primary key", Ctx.thrown(() -> kvt.iterator().forPrimaryKey(shortPrimary)));
        ctx.observe("iterator with a long prefix", Ctx.thrown(() -> kvt.iterator().forPrefix(ByteBuffer.allocate(9))));
        ctx.observe("iterator page of 0", Ctx.thrown(() -> kvt.iterator().maxIterationSize(0)));
        // Nothing of the refused calls reached the table.
        ctx.observe("entries", readAll(kvt.iterator().all().keys()).items().size());
    }

    @Check
    public void tableWithoutSecondaryKeys(Ctx ctx) {
        KeyValueTable kvt = newOpenTable(ctx, 3, 0);
        List<String> names = new ArrayList<>();
        for (long primary = 1; primary <= 12; primary++) {
            kvt.update(new Insert(new TableKey(pk(primary)), value("v" + primary))).join();
            names.add(Long.toString(primary));
        }
        ctx.observe("get", text(kvt.get(new TableKey(pk(5))).join()));
        ctx.observe("get missing", text(kvt.get(new TableKey(pk(13))).join()));
        ctx.observe("insert again", Ctx.thrown(() -> kvt.update(new Insert(new TableKey(pk(5)), value("x"))).join()));
        ctx.observe("with a secondary key", Ctx.thrown(() -> kvt.update(new Put(key(5, 1), value("x"))).join()));
        ctx.observe("all", checkKeys(names, kvt.iterator().maxIterationSize(5).all(), 5));
        ctx.observe("range", checkKeys(names.subList(2, 6), kvt.iterator().maxIterationSize(3).forRange(pk(3), pk(6)), 3));
        ctx.observe("primary key", checkKeys(List.of("7"), kvt.iterator().forPrimaryKey(pk(7)), ANY_PAGES));
        kvt.update(new Remove(new TableKey(pk(7)))).join();
        ctx.observe("primary key after remove", checkKeys(List.of(), kvt.iterator().forPrimaryKey(pk(7)), ANY_PAGES));
    }

    // ---- helpers ----

    private static KeyValueTable newOpenTable(Ctx ctx, int partitions, int secondaryKeyLength) {
        String scope = ctx.newScope();
        String table = newTable(ctx, scope, config(partitions, secondaryKeyLength));
        return open(ctx, scope, table);
    }

    /** The class a conditional update fails with; an error when it succeeds or fails otherwise. */
    private static String conditionalFailure(Ctx.ThrowingRunnable update) {
        try {
            update.run();
        } catch (Exception e) {
            Throwable cause = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
            require(cause instanceof ConditionalTableUpdateException, "not a conditional failure: " + cause);
            equal("BadKeyVersionException", cause.getClass().getSimpleName(), "the failure of a condition on a missing key");
            return cause.getClass().getSimpleName();
        }
        throw new AssertionError("a conditional update on a missing key succeeded");
    }

    private static List<TableModification> modifications(List<TableKey> keys, Function<TableKey, TableModification> make) {
        return keys.stream().map(make).toList();
    }

    private static String texts(List<TableEntry> entries) {
        return entries.stream().map(KvtSupport::text).toList().toString();
    }

    private static List<Version> versions(List<TableEntry> entries) {
        return entries.stream().map(TableEntry::getVersion).toList();
    }

    /**
     * Asserts that {@code iterator.keys()} answers {@code expected} in order, in pages of at most
     * {@code pageSize} (unless {@link #ANY_PAGES}); answers the count (an observation).
     */
    private static int checkKeys(List<String> expected, KeyValueTableIterator iterator, int pageSize) {
        KvtSupport.Pages<TableKey> pages = readAll(iterator.keys());
        equal(expected, pages.items().stream().map(KvtSupport::name).toList(), "keys iterated");
        checkPaging(pages, pageSize);
        return pages.items().size();
    }

    /** As {@link #checkKeys}, for entries: keys in order, each with its value and current version. */
    private static int checkEntries(KeyValueTable kvt, List<String> expected, KeyValueTableIterator iterator, int pageSize) {
        KvtSupport.Pages<TableEntry> pages = readAll(iterator.entries());
        List<TableEntry> entries = pages.items();
        equal(expected, entries.stream().map(entry -> name(entry.getKey())).toList(), "entries iterated");
        for (TableEntry entry : entries) {
            equal("v" + name(entry.getKey()), text(entry), "value of " + name(entry.getKey()));
        }
        if (!entries.isEmpty()) {
            List<TableEntry> read = kvt.getAll(entries.stream().map(TableEntry::getKey).toList()).join();
            equal(versions(read), versions(entries), "versions of iterated entries against getAll");
        }
        checkPaging(pages, pageSize);
        return entries.size();
    }

    private static void checkPaging(KvtSupport.Pages<?> pages, int pageSize) {
        if (pageSize == ANY_PAGES) {
            return;
        }
        int items = pages.items().size();
        require(pages.largestPage() <= pageSize, "a page of " + pages.largestPage() + " items, more than " + pageSize);
        require(pages.pages() >= (items + pageSize - 1) / pageSize, "too few pages: " + pages.pages() + " for " + items);
    }
}
