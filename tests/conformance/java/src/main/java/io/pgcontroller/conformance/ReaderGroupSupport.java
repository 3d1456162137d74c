package io.pgcontroller.conformance;

import io.pgcontroller.conformance.EventSupport.Keyed;
import io.pravega.client.admin.ReaderGroupManager;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.ReaderGroup;
import io.pravega.client.stream.ReaderGroupConfig;

import java.util.List;

/**
 * What the reader-group and watermark checks share: events named {@code e<i>} written under eight
 * routing keys, and reader groups of the check's own with readers of names the checks choose.
 */
final class ReaderGroupSupport {
    private ReaderGroupSupport() {
    }

    /** Events e<from> .. e<to - 1>, event e<i> under the routing key k<i % 8>. */
    static List<Keyed> events(int from, int to) {
        return EventSupport.numberedEvents("e", from, to, i -> "k" + i % 8);
    }

    /** The number of an event e<i>; the watermark checks write event e<i> at time i. */
    static int index(String event) {
        return Integer.parseInt(event.substring(1));
    }

    /** A new group of {@code config} in the stream's scope, closed when the check ends. */
    static ReaderGroup newGroup(Ctx ctx, ScopedStream target, ReaderGroupConfig config) {
        return group(ctx, ctx.readerGroupManager(target.scope()), ctx.unique("rg"), config);
    }

    /** Creates the group {@code name} (it must not exist yet) and returns it, closed when the check ends. */
    static ReaderGroup group(Ctx ctx, ReaderGroupManager manager, String name, ReaderGroupConfig config) {
        EventSupport.createGroup(manager, name, config);
        return ctx.closeLater(manager.getReaderGroup(name));
    }

    /** The reader {@code id} of {@code group}, from the stream's client factory. */
    static EventStreamReader<String> reader(Ctx ctx, ScopedStream target, String id, ReaderGroup group) {
        return EventSupport.reader(ctx, target.factory(), id, group.getGroupName(), EventSupport.STRINGS);
    }
}
