package io.pgcontroller.conformance;

import io.pravega.client.ByteStreamClientFactory;
import io.pravega.client.byteStream.ByteStreamReader;
import io.pravega.client.byteStream.ByteStreamWriter;

import java.io.IOException;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;

/**
 * ByteStreamClientFactory on a one-segment stream: bytes written with flushes read back, seeking,
 * head and tail offsets, truncateDataBefore, closeAndSeal (the reader's end, a later writer's
 * refusal), available() and a blocking read at the tail.
 */
public class ByteStreamChecks {
    /** Each write is larger than one append block (PendingEvent.MAX_WRITE_SIZE is 8 MiB; the buffer 4 KiB). */
    private static final int CHUNK = 64 * 1024;
    private static final int CHUNKS = 5;
    private static final int TOTAL = CHUNK * CHUNKS;
    /** How long a read that should block is given to return early before we call it blocked. */
    private static final long BLOCKED_MILLIS = 500;

    @Check
    public void bytesWrittenWithFlushesReadBackInOrder(Ctx ctx) throws Exception {
        ByteStream stream = ByteStream.create(ctx);
        ByteStreamWriter writer = stream.writer();
        boolean tailFollowsEveryFlush = true;
        for (int i = 0; i < CHUNKS; i++) {
            writer.write(pattern(i * CHUNK, CHUNK));
            writer.flush();
            tailFollowsEveryFlush &= writer.fetchTailOffset() == (long) (i + 1) * CHUNK;
        }
        ctx.observe("writer tail = bytes flushed after each flush", tailFollowsEveryFlush);
        require(tailFollowsEveryFlush, "the writer's tail offset is not the number of bytes flushed");

        ByteStreamReader reader = stream.reader();
        ctx.observe("reader head is 0", reader.fetchHeadOffset() == 0);
        ctx.observe("reader tail = bytes written", reader.fetchTailOffset() == TOTAL);
        equal(0L, reader.fetchHeadOffset(), "head offset of an untruncated stream");
        equal((long) TOTAL, reader.fetchTailOffset(), "tail offset");
        requireBytes(reader, 0, TOTAL, "bytes read back differ from those written");
        equal((long) TOTAL, reader.getOffset(), "reader offset after reading everything");
        ctx.observe("available at the tail of an open stream", reader.available());
    }

    @Check
    public void seekToOffsetReadsFromThatOffset(Ctx ctx) throws Exception {
        ByteStream stream = ByteStream.create(ctx);
        writeChunks(stream, true);
        ByteStreamReader reader = stream.reader();

        int forward = 3 * CHUNK + 1234;
        reader.seekToOffset(forward);
        requireBytes(reader, forward, 5000, "bytes after a forward seek");
        int backward = 17;
        reader.seekToOffset(backward);
        equal((long) backward, reader.getOffset(), "offset after a backward seek");
        requireBytes(reader, backward, CHUNK, "bytes after a backward seek");

        reader.seekToOffset(reader.fetchTailOffset());
        equal((long) TOTAL, reader.getOffset(), "offset after seeking to the tail");
        ctx.observe("available after seeking to the tail", reader.available());
    }

    @Check
    public void truncateDataBeforeMovesTheHead(Ctx ctx) throws Exception {
        ByteStream stream = ByteStream.create(ctx);
        ByteStreamWriter writer = writeChunks(stream, true);
        ByteStreamReader earlyReader = stream.reader();

        int cut = 2 * CHUNK + 100;
        writer.truncateDataBefore(cut);
        ctx.observe("writer head = cut", writer.fetchHeadOffset() == cut);
        ctx.observe("reader head = cut", earlyReader.fetchHeadOffset() == cut);
        ctx.observe("tail unchanged", earlyReader.fetchTailOffset() == TOTAL);
        equal((long) cut, earlyReader.fetchHeadOffset(), "head offset after truncateDataBefore");

        // Seeking drops whatever the reader had buffered from before the truncation.
        earlyReader.seekToOffset(cut - 1);
        String beforeHead = Ctx.thrown(() -> earlyReader.read(new byte[10]));
        ctx.observe("read before the head", beforeHead);
        equal("SegmentTruncatedException", beforeHead, "a read before the head");
        earlyReader.seekToOffset(cut);
        requireBytes(earlyReader, cut, 1000, "bytes at the new head");

        ByteStreamReader lateReader = stream.reader();
        ctx.observe("a new reader starts at the head", lateReader.getOffset() == cut);
        equal((long) cut, lateReader.getOffset(), "a new reader's first offset");
        requireBytes(lateReader, cut, TOTAL - cut, "a new reader's bytes after truncation");
    }

    @Check
    public void closeAndSealEndsTheStreamForReadersAndWriters(Ctx ctx) throws Exception {
        ByteStream stream = ByteStream.create(ctx);
        writeChunks(stream, false).closeAndSeal();

        ByteStreamReader reader = stream.reader();
        ctx.observe("tail after closeAndSeal = bytes written", reader.fetchTailOffset() == TOTAL);
        requireBytes(reader, 0, TOTAL, "bytes written before closeAndSeal");
        ctx.observe("read() at the end", reader.read());
        ctx.observe("read(byte[]) at the end", reader.read(new byte[100]));
        ctx.observe("available at the end", reader.available());
        equal(-1, reader.read(), "read() past the end of a sealed stream");

        ctx.observe("a later writer writing", laterWriterOutcome(stream));
        ctx.observe("tail after the refused write", reader.fetchTailOffset() == TOTAL);
    }

    @Check
    public void blockingReadAtTheTailReturnsWhenDataArrives(Ctx ctx) throws Exception {
        ByteStream stream = ByteStream.create(ctx);
        ByteStreamWriter writer = stream.writer();
        writer.write(pattern(0, 1000));
        writer.flush();
        ByteStreamReader reader = stream.reader();
        requireBytes(reader, 0, 1000, "bytes before the tail");
        ctx.observe("available at the tail", reader.available());

        byte[] buffer = new byte[4000];
        CompletableFuture<Integer> read = CompletableFuture.supplyAsync(() -> readOnce(reader, buffer));
        // A read at the tail has nothing to return: it must still be waiting after a while.
        ctx.observe("read returned before new data", returnsWithin(read, BLOCKED_MILLIS));
        writer.write(pattern(1000, 3000));
        writer.flush();
        int count = read.get(30, TimeUnit.SECONDS);
        require(count > 0 && count <= 3000, "the blocked read returned " + count + " bytes");
        require(Arrays.equals(pattern(1000, count), Arrays.copyOf(buffer, count)), "bytes of the blocked read");
        requireBytes(reader, 1000 + count, 3000 - count, "bytes after the blocked read");
    }

    /**
     * onDataAvailable at the tail completes once bytes arrive. (Not beside a blocking read: the
     * client runs the future's callback on its socket thread, which then waits for the lock the
     * blocked read holds, and neither ever ends.)
     */
    @Check
    public void onDataAvailableAtTheTailCompletesWhenDataArrives(Ctx ctx) throws Exception {
        ByteStream stream = ByteStream.create(ctx);
        ByteStreamWriter writer = stream.writer();
        ByteStreamReader reader = stream.reader();
        ctx.observe("available of an empty stream", reader.available());

        CompletableFuture<Integer> dataAvailable = reader.onDataAvailable();
        ctx.observe("completed before new data", returnsWithin(dataAvailable, BLOCKED_MILLIS));
        writer.write(pattern(0, 2000));
        writer.flush();
        int available = dataAvailable.get(30, TimeUnit.SECONDS);
        ctx.observe("available when it completes is positive", available > 0);
        require(available > 0 && available <= 2000, "onDataAvailable answered " + available);
        equal(available, reader.available(), "available() after onDataAvailable completed");
        requireBytes(reader, 0, 2000, "bytes after onDataAvailable");
    }

    /** A one-segment stream of a new scope, and readers and writers of it, closed when the check ends. */
    private record ByteStream(Ctx ctx, ByteStreamClientFactory factory, String name) {
        static ByteStream create(Ctx ctx) {
            String scope = ctx.newScope();
            ByteStreamClientFactory factory = ctx.closeLater(ByteStreamClientFactory.withScope(scope, ctx.clientConfig()));
            return new ByteStream(ctx, factory, ctx.newStream(scope, 1));
        }

        ByteStreamWriter writer() {
            return ctx.closeLater(factory.createByteStreamWriter(name));
        }

        ByteStreamReader reader() {
            return ctx.closeLater(factory.createByteStreamReader(name));
        }
    }

    /** Writes CHUNKS chunks of the pattern, each flushed when {@code flushEach}, and returns the (open) writer. */
    private static ByteStreamWriter writeChunks(ByteStream stream, boolean flushEach) throws IOException {
        ByteStreamWriter writer = stream.writer();
        for (int i = 0; i < CHUNKS; i++) {
            writer.write(pattern(i * CHUNK, CHUNK));
            if (flushEach) {
                writer.flush();
            }
        }
        return writer;
    }

    /**
     * What a writer created after the seal gets when it writes and flushes: the class thrown, or
     * "hangs" when the flush does not end (the writer retries in the background for ever).
     */
    private static String laterWriterOutcome(ByteStream stream) throws Exception {
        CompletableFuture<String> outcome = CompletableFuture.supplyAsync(() -> Ctx.thrown(() -> {
            ByteStreamWriter later = stream.writer();
            later.write(pattern(0, 100));
            later.flush();
        }));
        try {
            return outcome.get(30, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            return "hangs";
        }
    }

    private static boolean returnsWithin(CompletableFuture<?> future, long millis) throws Exception {
        try {
            future.get(millis, TimeUnit.MILLISECONDS);
            return true;
        } catch (TimeoutException e) {
            return false;
        } catch (ExecutionException e) {
            return true;
        }
    }

    private static int readOnce(ByteStreamReader reader, byte[] buffer) {
        try {
            return reader.read(buffer);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** Reads exactly {@code length} bytes and requires them to be the pattern's at {@code offset}. */
    private static void requireBytes(ByteStreamReader reader, int offset, int length, String what) throws Exception {
        require(Arrays.equals(pattern(offset, length), readFully(reader, length)), what);
    }

    /** Reads exactly {@code length} bytes (a read returns what has arrived, possibly less). */
    private static byte[] readFully(ByteStreamReader reader, int length) throws Exception {
        byte[] result = new byte[length];
        int filled = 0;
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (filled < length) {
            int count = reader.read(result, filled, length - filled);
            require(count >= 0, "end of stream after " + filled + " of " + length + " bytes");
            filled += count;
            require(System.nanoTime() < deadline, "read only " + filled + " of " + length + " bytes");
        }
        return result;
    }

    /** The bytes at [offset, offset + length) of what these checks write: a position-dependent pattern. */
    private static byte[] pattern(int offset, int length) {
        byte[] bytes = new byte[length];
        for (int i = 0; i < length; i++) {
            long position = offset + i;
            bytes[i] = (byte) ((position * 31 + (position >>> 8) * 7) & 0xFF);
        }
        return bytes;
    }
}
