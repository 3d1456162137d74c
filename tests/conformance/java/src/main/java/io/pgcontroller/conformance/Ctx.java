package io.pgcontroller.conformance;

import io.grpc.StatusRuntimeException;
import io.pravega.client.ClientConfig;
import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.admin.ReaderGroupManager;
import io.pravega.client.admin.StreamManager;
import io.pravega.client.stream.ScalingPolicy;
import io.pravega.client.stream.StreamConfiguration;
import io.pravega.common.concurrent.ExecutorServiceHelpers;

import java.net.URI;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;

/**
 * What a check gets: the server under test, clients it closes when the check ends, names no other
 * check uses, assertions, and observations. An observation is a value the check saw (an answer, an
 * exception's class); the runner compares a check's observations between serve and Pravega, so they
 * must not contain anything that differs by chance (generated names, times, ids).
 */
public final class Ctx implements AutoCloseable {
    /**
     * How long a check waits for one answer of the server: long enough for a busy server on 2 cores,
     * short enough that a hang fails the check.
     */
    public static final long ANSWER_SECONDS = 30;
    /** How {@link #answer} begins when the action threw. */
    private static final String REFUSAL = "threw ";

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

    /** A new scope for this check alone, a stream of {@code segments} fixed segments in it, and its client factory. */
    public ScopedStream newScopedStream(int segments) {
        String scope = newScope();
        return new ScopedStream(scope, newStream(scope, segments), clientFactory(scope));
    }

    public ScopedStream newScopedStream(StreamConfiguration config) {
        String scope = newScope();
        return new ScopedStream(scope, newStream(scope, config), clientFactory(scope));
    }

    public EventStreamClientFactory clientFactory(String scope) {
        return closeLater(EventStreamClientFactory.withScope(scope, clientConfig()));
    }

    public ReaderGroupManager readerGroupManager(String scope) {
        return closeLater(ReaderGroupManager.withScope(scope, clientConfig()));
    }

    /** A scheduled pool for the client's asynchronous calls (scaling, checkpoints), shut down when the check ends. */
    public ScheduledExecutorService executor() {
        ScheduledExecutorService executor = ExecutorServiceHelpers.newScheduledThreadPool(2, "conf-" + checkName);
        closeLater(executor::shutdownNow);
        return executor;
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

    /**
     * What {@code action} answered, or how it was refused: "threw ", the class of what it threw (as
     * {@link #thrown}) and, for a gRPC error, its status code, which says more than the class.
     */
    public static String answer(Callable<?> action) {
        try {
            return String.valueOf(action.call());
        } catch (Exception e) {
            StatusRuntimeException grpc = find(e, StatusRuntimeException.class);
            return REFUSAL + rootClass(e) + (grpc == null ? "" : " " + grpc.getStatus().getCode());
        }
    }

    /** Records how {@code action} was refused ({@link #answer}) and requires that it was: it threw. */
    public void observeRefusal(String key, Callable<?> action) {
        String answer = answer(action);
        observe(key, answer);
        require(answer.startsWith(REFUSAL), key + " was not refused: it answered " + answer);
    }

    /** The first cause of {@code e} (itself included) of class {@code type}, or null. */
    public static <T extends Throwable> T find(Throwable e, Class<T> type) {
        for (Throwable cause = e; cause != null; cause = cause.getCause() == cause ? null : cause.getCause()) {
            if (type.isInstance(cause)) {
                return type.cast(cause);
            }
        }
        return null;
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
