package io.pgcontroller.conformance;

import io.grpc.ManagedChannel;
import io.pravega.client.ClientConfig;
import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.admin.ReaderGroupManager;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.ReaderGroupConfig;
import io.pravega.client.stream.Stream;
import io.pravega.controller.stream.api.grpc.v1.Controller;
import io.pravega.controller.stream.api.grpc.v1.ControllerServiceGrpc;
import io.pravega.shared.security.auth.Credentials;
import io.pravega.shared.security.auth.DefaultCredentials;

import java.net.URI;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * What SecurityChecks and DiscoveryChecks share: client configurations with other credentials or
 * trust than the runner's, the accounts tests/conformance/secure.py makes, the controller list, and
 * events written and read with such a configuration.
 */
final class SecuritySupport {
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

    /** How many controllers getControllerServerList names (their addresses differ by server). */
    static int controllerCount(ManagedChannel channel) {
        return ControllerServiceGrpc.newBlockingStub(channel)
                .withDeadlineAfter(Ctx.ANSWER_SECONDS, TimeUnit.SECONDS)
                .getControllerServerList(Controller.ServerRequest.getDefaultInstance())
                .getNodeURICount();
    }

    /**
     * Writes {@code prefix0} .. {@code prefix<count - 1>} with {@code config}, under one routing key
     * (so they are read in that order), and answers them once every one is acknowledged.
     */
    static List<String> write(Ctx ctx, ClientConfig config, String scope, String stream, String prefix, int count) {
        EventStreamClientFactory factory = ctx.closeLater(EventStreamClientFactory.withScope(scope, config));
        return EventSupport.write(EventSupport.writer(ctx, factory, stream),
                EventSupport.numberedEvents(prefix, 0, count, i -> "key"));
    }

    /**
     * Reads {@code stream} from its head with {@code config}, through a new reader group, until
     * {@code expected} events came or {@link Ctx#ANSWER_SECONDS} passed, and answers what it read.
     */
    static List<String> read(Ctx ctx, ClientConfig config, String scope, String stream, int expected) {
        ReaderGroupManager groups = ctx.closeLater(ReaderGroupManager.withScope(scope, config));
        EventStreamClientFactory factory = ctx.closeLater(EventStreamClientFactory.withScope(scope, config));
        EventStreamReader<String> reader = EventSupport.readerOfNewGroup(ctx, groups, factory,
                ReaderGroupConfig.builder().stream(Stream.of(scope, stream)).build(), EventSupport.STRINGS);
        return EventSupport.readUpTo(reader, expected, Duration.ofSeconds(Ctx.ANSWER_SECONDS));
    }
}
