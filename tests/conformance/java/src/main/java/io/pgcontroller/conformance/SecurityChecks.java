package io.pgcontroller.conformance;

import io.grpc.ManagedChannel;
import io.grpc.netty.shaded.io.grpc.netty.GrpcSslContexts;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.pravega.client.ClientConfig;
import io.pravega.client.admin.StreamManager;
import io.pravega.client.control.impl.ControllerImpl;
import io.pravega.client.stream.ScalingPolicy;
import io.pravega.client.stream.StreamConfiguration;
import io.pravega.shared.security.auth.AccessOperation;
import io.pravega.shared.security.auth.Credentials;
import io.pravega.shared.security.auth.DefaultCredentials;

import javax.net.ssl.SSLHandshakeException;
import java.io.File;
import java.net.URI;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static io.pgcontroller.conformance.Ctx.ANSWER_SECONDS;
import static io.pgcontroller.conformance.Ctx.answer;
import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;

/**
 * Authentication, authorization and TLS (profile "secure": both servers with auth and TLS on,
 * set up by tests/conformance/secure.py): the runner's account works end to end over TLS with
 * host names validated, and so does a Bearer token of the suite's own handler; a wrong password,
 * an unknown account or token, no credentials and a token of a method no handler serves are
 * refused; a client that does not trust the CA, or speaks plain
 * text, does not get through; the controller list is open without credentials; and the ACLs of
 * an account limited to some scopes, and of one that may only read, are enforced.
 */
public class SecurityChecks {
    private static final int EVENTS = 20;
    /** The one token the suite's Bearer handlers know (TokenAuthHandler.java, token_plugin.py). */
    private static final String SUITE_TOKEN = "conformance-bearer-token";

    @Check(profile = "secure")
    public void defaultCredentialsCreateWriteAndReadOverTls(Ctx ctx) throws Exception {
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 2);
        List<String> events = SecuritySupport.write(ctx, ctx.clientConfig(), scope, stream, "e", EVENTS);
        List<String> read = SecuritySupport.read(ctx, ctx.clientConfig(), scope, stream, EVENTS);
        equal(events, read, "events read back (one routing key, so in order)");
        ctx.observe("read", read.size());
        ctx.observe("stream exists", ctx.streamManager().checkStreamExists(scope, stream));
    }

    @Check(profile = "secure")
    public void wrongPasswordAndUnknownAccountAreRefused(Ctx ctx) {
        Server server = ctx.server();
        String scope = ctx.unique("conf");
        StreamManager wrongPassword = manager(ctx, new DefaultCredentials(server.password() + "x", server.user()));
        ctx.observeRefusal("createScope, wrong password", () -> wrongPassword.createScope(scope));
        StreamManager unknown = manager(ctx, new DefaultCredentials(server.password(), ctx.unique("nobody")));
        ctx.observeRefusal("createScope, unknown account", () -> unknown.createScope(scope));
        equal(false, ctx.streamManager().checkScopeExists(scope), "the refused createScope created the scope");
    }

    @Check(profile = "secure")
    public void noCredentialsAreRefused(Ctx ctx) {
        String scope = ctx.newScope();
        StreamManager anonymous = manager(ctx, null);
        ctx.observeRefusal("createScope", () -> anonymous.createScope(ctx.unique("conf")));
        ctx.observeRefusal("checkScopeExists", () -> anonymous.checkScopeExists(scope));
        ctx.observeRefusal("createStream", () -> anonymous.createStream(scope, ctx.unique("s"),
                StreamConfiguration.builder().scalingPolicy(ScalingPolicy.fixed(1)).build()));
        ctx.observeRefusal("listScopes", () -> anonymous.listScopes().hasNext());
    }

    /**
     * A credential of a method no handler serves ("Negotiate" and a token): both servers serve
     * Basic and the suite's Bearer handler only, so it is refused like no credentials at all.
     */
    @Check(profile = "secure")
    public void tokenOfAMethodNoHandlerServesIsRefused(Ctx ctx) {
        String scope = ctx.newScope();
        StreamManager negotiate = manager(ctx, new TokenCredential("Negotiate", "conformance-" + ctx.unique("token")));
        ctx.observeRefusal("createScope", () -> negotiate.createScope(ctx.unique("conf")));
        ctx.observeRefusal("checkScopeExists", () -> negotiate.checkScopeExists(scope));
    }

    /**
     * A token-based credential: the method "Bearer", served on both servers by the suite's own
     * handler (tests/conformance/token_plugin.py through serve's --auth-handlers; the same handler
     * in Java on Pravega's class path), which knows one token. It creates, writes and reads as the
     * password account does, and delegation tokens reach the segment stores for it alike.
     */
    @Check(profile = "secure")
    public void bearerTokenOfAHandlerCreatesWritesAndReads(Ctx ctx) throws Exception {
        ClientConfig bearer = SecuritySupport.withCredentials(ctx.server(), new TokenCredential("Bearer", SUITE_TOKEN));
        StreamManager manager = ctx.closeLater(StreamManager.create(bearer));
        String scope = ctx.unique("conf");
        String stream = ctx.unique("s");
        ctx.observe("createScope", manager.createScope(scope));
        ctx.observe("createStream", manager.createStream(scope, stream,
                StreamConfiguration.builder().scalingPolicy(ScalingPolicy.fixed(2)).build()));
        List<String> events = SecuritySupport.write(ctx, bearer, scope, stream, "t", EVENTS);
        List<String> read = SecuritySupport.read(ctx, bearer, scope, stream, EVENTS);
        equal(events, read, "events read back with the bearer token (one routing key, so in order)");
        ctx.observe("read", read.size());
    }

    /** A Bearer token its handler does not know is refused as a wrong password is. */
    @Check(profile = "secure")
    public void unknownBearerTokenIsRefused(Ctx ctx) {
        String scope = ctx.newScope();
        StreamManager stranger = manager(ctx, new TokenCredential("Bearer", SUITE_TOKEN + "-" + ctx.unique("x")));
        ctx.observeRefusal("createScope", () -> stranger.createScope(ctx.unique("conf")));
        ctx.observeRefusal("checkScopeExists", () -> stranger.checkScopeExists(scope));
    }

    /** The client validates the controller's certificate against its trust store, the JVM's CAs here. */
    @Check(profile = "secure")
    public void clientNotTrustingTheCaIsRefused(Ctx ctx) {
        ClientConfig config = SecuritySupport.withDefaultTrust(ctx.server(), ctx.controllerUri());
        ControllerImpl controller = ControllerSupport.singleAttemptController(ctx, config);
        Exception failure = failure(() -> controller.createScope(ctx.unique("conf")).get(ANSWER_SECONDS, TimeUnit.SECONDS));
        require(failure != null, "createScope through an untrusted certificate succeeded");
        ctx.observe("createScope", answer(() -> {
            throw failure;
        }));
        ctx.observe("handshake failed", Ctx.find(failure, SSLHandshakeException.class) != null);
    }

    @Check(profile = "secure")
    public void plainTextClientIsRefused(Ctx ctx) {
        URI tls = ctx.controllerUri();
        URI plain = URI.create("tcp://" + tls.getHost() + ":" + tls.getPort());
        ClientConfig config = ClientConfig.builder().controllerURI(plain)
                .credentials(new DefaultCredentials(ctx.server().password(), ctx.server().user())).build();
        ControllerImpl controller = ControllerSupport.singleAttemptController(ctx, config);
        ctx.observeRefusal("createScope", () -> controller.createScope(ctx.unique("conf")).get(ANSWER_SECONDS, TimeUnit.SECONDS));
    }

    /**
     * Pravega leaves getControllerServerList open: clients discover controllers before they log
     * in. Only whether it is refused for credentials is compared: Pravega's standalone answers it
     * with an error of its own (see DiscoveryChecks).
     */
    @Check(profile = "secure")
    public void controllerServerListIsOpenWithoutCredentials(Ctx ctx) throws Exception {
        URI uri = ctx.controllerUri();
        ManagedChannel channel = NettyChannelBuilder.forAddress(uri.getHost(), uri.getPort())
                .sslContext(GrpcSslContexts.forClient().trustManager(new File(ctx.server().trustStore())).build())
                .build();
        ctx.closeLater(channel::shutdownNow);
        String answer = answer(() -> SecuritySupport.controllerCount(channel));
        boolean refused = answer.endsWith(" UNAUTHENTICATED") || answer.endsWith(" PERMISSION_DENIED");
        ctx.observe("refused for want of credentials", refused);
        require(!refused, "getControllerServerList without credentials: " + answer);
    }

    /** READ_UPDATE on prn::/scope:lim* (secure.py): everything inside those scopes, nothing outside. */
    @Check(profile = "secure")
    public void limitedAccountWorksOnlyInsideItsScopes(Ctx ctx) throws Exception {
        String own = SecuritySupport.LIMITED_SCOPE_PREFIX + ctx.unique("");
        require(ctx.streamManager().createScope(own), "createScope(" + own + ") answered false");
        String other = ctx.newScope();
        ClientConfig limited = SecuritySupport.withCredentials(ctx.server(),
                SecuritySupport.account(ctx.server(), SecuritySupport.LIMITED));
        StreamManager manager = ctx.closeLater(StreamManager.create(limited));
        String stream = ctx.unique("s");
        ctx.observe("createStream in its scope", answer(() -> manager.createStream(own, stream,
                StreamConfiguration.builder().scalingPolicy(ScalingPolicy.fixed(1)).build())));
        List<String> events = SecuritySupport.write(ctx, limited, own, stream, "l", EVENTS);
        equal(events, SecuritySupport.read(ctx, limited, own, stream, EVENTS), "events the limited account read");
        ctx.observe("listStreams in its scope", answer(() -> manager.listStreams(own).hasNext()));
        ctx.observeRefusal("createScope", () -> manager.createScope(SecuritySupport.LIMITED_SCOPE_PREFIX + ctx.unique("")));
        ctx.observeRefusal("createStream elsewhere", () -> manager.createStream(other, ctx.unique("s"),
                StreamConfiguration.builder().scalingPolicy(ScalingPolicy.fixed(1)).build()));
        ctx.observeRefusal("checkScopeExists elsewhere", () -> manager.checkScopeExists(other));
        ctx.observe("listScopes", answer(() -> manager.listScopes().hasNext()));
    }

    /**
     * READ on prn::/scope:ro* (secure.py): it may look there and is given read tokens, and it
     * changes nothing: no stream, no seal, no token to write with (so no writer gets through).
     */
    @Check(profile = "secure")
    public void viewerLooksButChangesNothing(Ctx ctx) {
        String scope = viewerScope(ctx);
        String stream = ctx.newStream(scope, 1);
        ClientConfig viewer = viewerConfig(ctx);
        StreamManager manager = ctx.closeLater(StreamManager.create(viewer));
        ctx.observe("checkStreamExists", answer(() -> manager.checkStreamExists(scope, stream)));
        ctx.observeRefusal("createStream", () -> manager.createStream(scope, ctx.unique("s"),
                StreamConfiguration.builder().scalingPolicy(ScalingPolicy.fixed(1)).build()));
        ctx.observeRefusal("sealStream", () -> manager.sealStream(scope, stream));
        // The controller client itself, tried once: a writer retries a refused token for minutes.
        ControllerImpl controller = ControllerSupport.singleAttemptController(ctx, viewer);
        ctx.observe("read token granted", answer(() -> !controller.getOrRefreshDelegationTokenFor(scope, stream,
                AccessOperation.READ).get(ANSWER_SECONDS, TimeUnit.SECONDS).isEmpty()));
        ctx.observeRefusal("write token", () -> controller.getOrRefreshDelegationTokenFor(scope, stream,
                AccessOperation.WRITE).get(ANSWER_SECONDS, TimeUnit.SECONDS));
    }

    /**
     * With READ on the scope and its streams, an account reads through a reader group of its own:
     * Pravega's controller asks READ (not READ_UPDATE) of reader-group writes by default
     * (controller.security.auth.readerGroupStreams.writesWithReadPermissions.enable).
     */
    @Check(profile = "secure")
    public void viewerReadsThroughItsReaderGroup(Ctx ctx) throws Exception {
        String scope = viewerScope(ctx);
        String stream = ctx.newStream(scope, 1);
        List<String> events = SecuritySupport.write(ctx, ctx.clientConfig(), scope, stream, "v", EVENTS);
        ClientConfig viewer = viewerConfig(ctx);
        String read = answer(() -> SecuritySupport.read(ctx, viewer, scope, stream, EVENTS));
        ctx.observe("read", read);
        equal(events.toString(), read, "events the viewer read");
    }

    private static String viewerScope(Ctx ctx) {
        String scope = SecuritySupport.VIEWER_SCOPE_PREFIX + ctx.unique("");
        require(ctx.streamManager().createScope(scope), "createScope(" + scope + ") answered false");
        return scope;
    }

    private static ClientConfig viewerConfig(Ctx ctx) {
        return SecuritySupport.withCredentials(ctx.server(), SecuritySupport.account(ctx.server(), SecuritySupport.VIEWER));
    }

    private static StreamManager manager(Ctx ctx, Credentials credentials) {
        return ctx.closeLater(StreamManager.create(SecuritySupport.withCredentials(ctx.server(), credentials)));
    }

    private static Exception failure(Ctx.ThrowingRunnable action) {
        try {
            action.run();
            return null;
        } catch (Exception e) {
            return e;
        }
    }

    /** A credential of another method than Basic, as an OAuth or OIDC plugin would take one. */
    private record TokenCredential(String method, String token) implements Credentials {
        @Override
        public String getAuthenticationType() {
            return method;
        }

        @Override
        public String getAuthenticationToken() {
            return token;
        }
    }
}
