package io.pgcontroller.conformance;

import io.pravega.client.ClientConfig;
import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.admin.ReaderGroupManager;
import io.pravega.client.admin.StreamManager;
import io.pravega.client.stream.ScalingPolicy;
import io.pravega.client.stream.StreamConfiguration;

import java.net.URI;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ThreadLocalRandom;

/**
 * What a check gets: the server under test, clients it closes when the check ends, names no other
 * check uses, assertions, and observations. An observation is a value the check saw (an answer, an
 * exception's class); the runner compares a check's observations between serve and Pravega, so they
 * must not contain anything that differs by chance (generated names, times, ids).
 */
public final class Ctx implements AutoCloseable {
    private final Server server;
    private final String checkName;
    private final Deque<AutoCloseable> closeables = new ArrayDeque<>();
    private final Map<String, String> observations = new TreeMap<>();
    private StreamManager streamManager;

    Ctx(Server server, String checkName) {
        this.server = server;
        this.checkName = checkName;
    }

    public URI controllerUri() {
        return server.controller();
    }

    public ClientConfig clientConfig() {
        return server.clientConfig();
    }

    public Server server() {
        return server;
    }

    /** A name of letters and digits, unique to this run (Pravega's names allow [a-zA-Z0-9.-]). */
    public String unique(String prefix) {
        String suffix = Long.toString(ThreadLocalRandom.current().nextLong() & Long.MAX_VALUE, 36);
        return prefix + suffix;
    }

    /** The stream manager of this check, closed when it ends. */
    public synchronized StreamManager streamManager() {
        if (streamManager == null) {
            streamManager = closeLater(StreamManager.create(clientConfig()));
        }
        return streamManager;
    }

    /** A new scope for this check alone. */
    public String newScope() {
        String scope = unique("conf");
        require(streamManager().createScope(scope), "createScope(" + scope + ") answered false");
        return scope;
    }

    /** A new stream of {@code segments} fixed segments in {@code scope}. */
    public String newStream(String scope, int segments) {
        return newStream(scope, StreamConfiguration.builder().scalingPolicy(ScalingPolicy.fixed(segments)).build());
    }

    public String newStream(String scope, StreamConfiguration config) {
        String stream = unique("s");
        require(streamManager().createStream(scope, stream, config), "createStream(" + stream + ") answered false");
        return stream;
    }

    public EventStreamClientFactory clientFactory(String scope) {
        return closeLater(EventStreamClientFactory.withScope(scope, clientConfig()));
    }

    public ReaderGroupManager readerGroupManager(String scope) {
        return closeLater(ReaderGroupManager.withScope(scope, clientConfig()));
    }

    /** Closes {@code resource} when the check ends, after everything registered later. */
    public synchronized <T extends AutoCloseable> T closeLater(T resource) {
        closeables.push(resource);
        return resource;
    }

    /** Records a value for the comparison with the other server (see the class comment). */
    public synchronized void observe(String key, Object value) {
        observations.put(key, String.valueOf(value));
    }

    synchronized Map<String, String> observations() {
        return new TreeMap<>(observations);
    }

    public static void require(boolean condition, String message) {
        if (!condition) {
            throw new AssertionError(message);
        }
    }

    public static void equal(Object expected, Object actual, String what) {
        if (!Objects.equals(expected, actual)) {
            throw new AssertionError(what + ": expected <" + expected + "> but was <" + actual + ">");
        }
    }

    /** Polls {@code condition} every 100 ms until it holds; an error when {@code within} passes first. */
    public static void eventually(Duration within, String what, Callable<Boolean> condition) throws Exception {
        long deadline = System.nanoTime() + within.toNanos();
        while (!condition.call()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError(what + ": not within " + within.toSeconds() + " s");
            }
            Thread.sleep(100);
        }
    }

    /**
     * The class of what {@code action} throws (its cause's, through the client's wrappers), or
     * "none": an observation of how a server refuses something.
     */
    public static String thrown(ThrowingRunnable action) {
        try {
            action.run();
            return "none";
        } catch (Throwable e) {
            return rootClass(e);
        }
    }

    public static String rootClass(Throwable e) {
        Throwable cause = e;
        while ((cause instanceof java.util.concurrent.CompletionException
                || cause instanceof java.util.concurrent.ExecutionException
                || cause.getClass() == RuntimeException.class)
                && cause.getCause() != null) {
            cause = cause.getCause();
        }
        return cause.getClass().getSimpleName();
    }

    @FunctionalInterface
    public interface ThrowingRunnable {
        void run() throws Exception;
    }

    String checkName() {
        return checkName;
    }

    /**
     * Closes what the check registered, newest first. The resources are taken out under the lock
     * and closed outside it: a close that blocks must not also block the runner reading this
     * check's observations.
     */
    @Override
    public void close() {
        java.util.List<AutoCloseable> toClose;
        synchronized (this) {
            toClose = new java.util.ArrayList<>(closeables);
            closeables.clear();
        }
        for (AutoCloseable resource : toClose) {
            try {
                resource.close();
            } catch (Exception e) {
                // A resource that fails to close after the check ended does not change its outcome.
            }
        }
    }
}
