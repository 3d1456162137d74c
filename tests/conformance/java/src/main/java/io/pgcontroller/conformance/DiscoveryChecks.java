package io.pgcontroller.conformance;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.pravega.client.ClientConfig;
import io.pravega.client.admin.StreamManager;
import io.pravega.client.stream.ScalingPolicy;
import io.pravega.client.stream.StreamConfiguration;

import java.net.URI;
import java.util.List;

import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;

/**
 * Controller discovery: with a {@code pravega://} URI the client asks the controller for the
 * controller list (getControllerServerList) and connects to what it answers; a scope, a stream,
 * and events written and read all go through the discovered controller.
 */
public class DiscoveryChecks {
    private static final int EVENTS = 10;

    @Check
    public void discoveredControllerServesScopesStreamsAndEvents(Ctx ctx) throws Exception {
        URI given = ctx.controllerUri();
        ClientConfig discovering = ClientConfig.builder()
                .controllerURI(URI.create("pravega://" + given.getHost() + ":" + given.getPort()))
                .build();
        StreamManager manager = ctx.closeLater(StreamManager.create(discovering));
        String scope = ctx.unique("conf");
        require(manager.createScope(scope), "createScope(" + scope + ") of a new scope answered false");
        String stream = ctx.unique("s");
        require(manager.createStream(scope, stream, StreamConfiguration.builder().scalingPolicy(ScalingPolicy.fixed(1)).build()),
                "createStream(" + scope + "/" + stream + ") of a new stream answered false");
        List<String> events = SecuritySupport.write(ctx, discovering, scope, stream, "d", EVENTS);
        List<String> read = SecuritySupport.read(ctx, discovering, scope, stream, EVENTS);
        equal(events, read, "events read back through the discovered controller");
        ctx.observe("read", read.size());
        ctx.observe("scope seen directly", ctx.streamManager().checkScopeExists(scope));
    }

    /** The answer's shape only: the addresses differ (serve names its advertised host, Pravega "localhost"). */
    @Check
    public void controllerServerListNamesAController(Ctx ctx) {
        URI given = ctx.controllerUri();
        ManagedChannel channel = ManagedChannelBuilder.forAddress(given.getHost(), given.getPort())
                .usePlaintext()
                .build();
        ctx.closeLater(channel::shutdownNow);
        int controllers = SecuritySupport.controllerCount(channel);
        require(controllers >= 1, "getControllerServerList named no controller");
        ctx.observe("controllers", controllers);
    }
}
