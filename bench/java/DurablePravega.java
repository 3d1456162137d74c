import io.pravega.local.InProcPravegaCluster;
import org.apache.bookkeeper.conf.ServerConfiguration;
import org.apache.bookkeeper.util.LocalBookKeeper;

import java.net.Socket;

/**
 * bench/beside_pravega.py's durable Pravega: the standalone's controller and segment store in one
 * JVM as Pravega standalone runs them, but with the segment store's durable log in BookKeeper
 * (one local bookie whose journal is fsynced on this machine's disk, ensemble and quorums of 1)
 * and its long-term storage on the file system, so that an acknowledged event is on disk, as in
 * serve. ZooKeeper and the bookie run in this JVM too (BookKeeper's LocalBookKeeper), so its CPU
 * and memory are the server's, as the standalone's are.
 *
 * The BookKeeper client's settings come from system properties (bookkeeper.*); the journal's
 * directory is java.io.tmpdir. Prints the standalone's ready line once everything is started.
 * Run as a source file (Java 11+):
 * java -cp CLASSPATH bench/java/DurablePravega.java ZK_PORT BOOKIE_PORT CONTROLLER_PORT SEGMENT_STORE_PORT
 * REST_PORT FLUSH_WHEN_QUEUE_EMPTY
 */
public final class DurablePravega {
    private static final int BOOKIE_START_TIMEOUT_MS = 120_000;

    private DurablePravega() {
    }

    public static void main(String[] args) throws Exception {
        int zkPort = Integer.parseInt(args[0]);
        int bookiePort = Integer.parseInt(args[1]);
        int controllerPort = Integer.parseInt(args[2]);
        int segmentStorePort = Integer.parseInt(args[3]);
        int restPort = Integer.parseInt(args[4]);
        boolean flushWhenQueueEmpty = Boolean.parseBoolean(args[5]);

        ServerConfiguration bookie = new ServerConfiguration();
        // True: the journal fsyncs as soon as nothing more is queued (the lowest latency); false,
        // BookKeeper's default: it waits up to journalMaxGroupWaitMSec (2 ms) for more entries.
        bookie.setJournalFlushWhenQueueEmpty(flushWhenQueueEmpty);
        bookie.setAllowLoopback(true);
        // LocalBookKeeper blocks for the bookies' life: it runs on a thread of its own.
        Thread bookies = new Thread(() -> {
            try {
                LocalBookKeeper.startLocalBookies("127.0.0.1", zkPort, 1, true, bookiePort, bookie);
            } catch (Exception e) {
                e.printStackTrace();
                System.exit(3);
            }
        }, "local-bookkeeper");
        bookies.setDaemon(true);
        bookies.start();
        awaitListening(bookiePort);

        InProcPravegaCluster cluster = InProcPravegaCluster.builder()
                .isInProcZK(false).zkUrl("localhost:" + zkPort).zkPort(zkPort)
                .isInMemStorage(false)
                .isInProcController(true).controllerCount(1)
                .restServerPort(restPort).enableRestServer(false)
                .isInProcSegmentStore(true).segmentStoreCount(1).containerCount(4)
                .enableMetrics(false).enableAuth(false).enableTls(false)
                .build();
        cluster.setControllerPorts(new int[]{controllerPort});
        cluster.setSegmentStorePorts(new int[]{segmentStorePort});
        cluster.start();
        System.out.println("Pravega Sandbox is running locally now (durable: BookKeeper journal, "
                + "flushWhenQueueEmpty=" + flushWhenQueueEmpty + ")");
        System.out.flush();
        Thread.currentThread().join();
    }

    private static void awaitListening(int port) throws InterruptedException {
        long deadline = System.currentTimeMillis() + BOOKIE_START_TIMEOUT_MS;
        while (System.currentTimeMillis() < deadline) {
            try (Socket ignored = new Socket("127.0.0.1", port)) {
                return;
            } catch (java.io.IOException notYet) {
                Thread.sleep(100);
            }
        }
        throw new IllegalStateException("the bookie never listened on port " + port);
    }
}
