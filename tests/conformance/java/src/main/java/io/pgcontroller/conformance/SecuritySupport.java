package io.pgcontroller.conformance;

import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import io.pravega.client.ClientConfig;
import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.admin.ReaderGroupManager;
import io.pravega.client.control.impl.ControllerImpl;
import io.pravega.client.control.impl.ControllerImplConfig;
import io.pravega.client.stream.EventRead;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.ReaderConfig;
import io.pravega.client.stream.ReaderGroupConfig;
import io.pravega.client.stream.Stream;
import io.pravega.client.stream.impl.UTF8StringSerializer;
import io.pravega.controller.stream.api.grpc.v1.Controller;
import io.pravega.controller.stream.api.grpc.v1.ControllerServiceGrpc;
import io.pravega.shared.security.auth.Credentials;
import io.pravega.shared.security.auth.DefaultCredentials;

import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * What SecurityChecks and DiscoveryChecks share: client configurations with other credentials or
 * trust than the runner's, the accounts tests/conformance/secure.py makes, writing and reading
 * events, and how a refusal is recorded.
 */
final class SecuritySupport {
    /** Long enough for a busy server on 2 cores, short enough that a hang fails the check. */
    static final long ANSWER_SECONDS = 30;

    /** An account limited to the scopes named {@code lim...}: READ_UPDATE there, nothing elsewhere. */
    static final String LIMITED = "limited";
    static final String LIMITED_SCOPE_PREFIX = "lim";
    /** An account that may only READ in the scopes named {@code ro...}. */
    static final String VIEWER = "viewer";
    static final String VIEWER_SCOPE_PREFIX = "ro";

    private SecuritySupport() {
    }

    /**
     * The credentials of one of the further accounts of secure.py: its password is the runner's
     * password followed by "-" and the account's name, so the runner needs no option per account.
     */
    static Credentials account(Server server, String name) {
        return new DefaultCredentials(server.password() + "-" + name, name);
    }

    /** The server's TLS settings (its CA, host names validated) with {@code credentials}, or none. */
    static ClientConfig withCredentials(Server server, Credentials credentials) {
        ClientConfig.ClientConfigBuilder builder = ClientConfig.builder()
                .controllerURI(server.controller())
                .trustStore(server.trustStore())
                .validateHostName(true);
        if (credentials != null) {
            builder.credentials(credentials);
        }
        return builder.build();
    }

    /** The server's credentials and no trust store of ours: the JVM's default CAs, at {@code uri}. */
    static ClientConfig withDefaultTrust(Server server, URI uri) {
        return ClientConfig.builder()
                .controllerURI(uri)
                .credentials(new DefaultCredentials(server.password(), server.user()))
                .validateHostName(true)
                .build();
    }

    /**
     * A controller client that tries once: the client retries an unreachable controller
     * (UNAVAILABLE, as a failed TLS handshake is) for minutes with its default settings.
     */
    static ControllerImpl singleAttemptController(Ctx ctx, ClientConfig config) {
        ScheduledExecutorService executor = Executors.newSingleThreadScheduledExecutor();
        ctx.closeLater(executor::shutdownNow);
        ControllerImplConfig once = ControllerImplConfig.builder()
                .clientConfig(config)
                .retryAttempts(1)
                .initialBackoffMillis(1)
                .maxBackoffMillis(1)
                .build();
        return ctx.closeLater(new ControllerImpl(once, executor));
    }

    /**
     * What {@code action} answered, or how it was refused: "threw ", the class of what it threw
     * (as {@link Ctx#thrown}) and, for a gRPC error, its status code.
     */
    static String answer(Callable<?> action) {
        try {
            return String.valueOf(action.call());
        } catch (Exception e) {
            StatusRuntimeException grpc = find(e, StatusRuntimeException.class);
            return "threw " + Ctx.rootClass(e) + (grpc == null ? "" : " " + grpc.getStatus().getCode());
        }
    }

    /** Records how a call was refused and requires that it was. */
    static void refused(Ctx ctx, String key, Callable<?> action) {
        String answer = answer(action);
        ctx.observe(key, answer);
        Ctx.require(answer.startsWith("threw "), key + " was not refused: it answered " + answer);
    }

    /** The first cause of {@code e} (itself included) of class {@code type}, or null. */
    static <T extends Throwable> T find(Throwable e, Class<T> type) {
        for (Throwable cause = e; cause != null; cause = cause.getCause() == cause ? null : cause.getCause()) {
            if (type.isInstance(cause)) {
                return type.cast(cause);
            }
        }
        return null;
    }

    /** How many controllers getControllerServerList names (their addresses differ by server). */
    static int controllerCount(ManagedChannel channel) {
        return ControllerServiceGrpc.newBlockingStub(channel)
                .withDeadlineAfter(ANSWER_SECONDS, TimeUnit.SECONDS)
                .getControllerServerList(Controller.ServerRequest.getDefaultInstance())
                .getNodeURICount();
    }

    /** The events {@code prefix0 .. prefix(count-1)}, in the order written (one routing key). */
    static List<String> events(String prefix, int count) {
        List<String> events = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            events.add(prefix + i);
        }
        return events;
    }

    /** Writes {@code events} with one routing key and waits until each is acknowledged. */
    static void write(Ctx ctx, ClientConfig config, String scope, String stream, List<String> events)
            throws Exception {
        EventStreamClientFactory factory = ctx.closeLater(EventStreamClientFactory.withScope(scope, config));
        EventStreamWriter<String> writer = ctx.closeLater(factory.createEventWriter(stream,
                new UTF8StringSerializer(), EventWriterConfig.builder().build()));
        for (String event : events) {
            writer.writeEvent("key", event);
        }
        writer.flush();
    }

    /**
     * Reads {@code stream} from its head through a new reader group until {@code expected} events
     * came or {@link #ANSWER_SECONDS} passed, and answers what it read.
     */
    static List<String> read(Ctx ctx, ClientConfig config, String scope, String stream, int expected) {
        String group = ctx.unique("rg");
        ReaderGroupManager groups = ctx.closeLater(ReaderGroupManager.withScope(scope, config));
        groups.createReaderGroup(group, ReaderGroupConfig.builder().stream(Stream.of(scope, stream)).build());
        EventStreamClientFactory factory = ctx.closeLater(EventStreamClientFactory.withScope(scope, config));
        EventStreamReader<String> reader = ctx.closeLater(factory.createReader(ctx.unique("reader"), group,
                new UTF8StringSerializer(), ReaderConfig.builder().build()));
        List<String> read = new ArrayList<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(ANSWER_SECONDS);
        while (read.size() < expected && System.nanoTime() < deadline) {
            EventRead<String> event = reader.readNextEvent(500);
            if (event.getEvent() != null) {
                read.add(event.getEvent());
            }
        }
        return read;
    }
}
