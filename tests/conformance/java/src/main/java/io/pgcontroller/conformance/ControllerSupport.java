package io.pgcontroller.conformance;

import io.pravega.client.ClientConfig;
import io.pravega.client.control.impl.Controller;
import io.pravega.client.control.impl.ControllerImpl;
import io.pravega.client.control.impl.ControllerImplConfig;
import io.pravega.client.segment.impl.Segment;
import io.pravega.client.stream.Stream;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import static io.pgcontroller.conformance.Ctx.require;

/**
 * Pravega's controller client of a check's own, for what the public API has no method for: scaling
 * (StreamManager of 0.13 cannot scale), transactions by id, subscribers, writer marks, a table's
 * configuration, and the stream settings StreamManager drops.
 */
final class ControllerSupport {
    private static final long SCALE_SECONDS = 60;

    private ControllerSupport() {
    }

    /** A controller client with the client's default retries, closed when the check ends. */
    static ControllerImpl controller(Ctx ctx) {
        return controller(ctx, ControllerImplConfig.builder().clientConfig(ctx.clientConfig()).build());
    }

    /**
     * A controller client that tries each call once: with its default settings the client retries
     * for minutes what it deems transient, which a refusal can be (UNAVAILABLE, as a failed TLS
     * handshake is; UNKNOWN, as Pravega answers a lease it refuses).
     */
    static ControllerImpl singleAttemptController(Ctx ctx, ClientConfig config) {
        return controller(ctx, ControllerImplConfig.builder().clientConfig(config).retryAttempts(1).build());
    }

    private static ControllerImpl controller(Ctx ctx, ControllerImplConfig config) {
        return ctx.closeLater(new ControllerImpl(config, ctx.executor()));
    }

    /** Seals {@code sealed} and creates segments of {@code ranges} in their place, as Pravega's tests scale. */
    static void scale(Controller controller, ScheduledExecutorService executor, Stream stream, List<Long> sealed,
                      Map<Double, Double> ranges) throws Exception {
        boolean done = controller.scaleStream(stream, sealed, ranges, executor).getFuture()
                .get(SCALE_SECONDS, TimeUnit.SECONDS);
        require(done, "scaleStream of " + sealed + " into " + ranges + " answered false");
    }

    /** Seals every current segment and replaces them with the ranges between consecutive {@code bounds}. */
    static void replaceAllSegments(Controller controller, ScheduledExecutorService executor, Stream stream,
                                   double... bounds) throws Exception {
        List<Long> sealed = new ArrayList<>();
        for (Segment segment : controller.getCurrentSegments(stream.getScope(), stream.getStreamName())
                .get(Ctx.ANSWER_SECONDS, TimeUnit.SECONDS).getSegments()) {
            sealed.add(segment.getSegmentId());
        }
        Map<Double, Double> ranges = new LinkedHashMap<>();
        for (int i = 0; i + 1 < bounds.length; i++) {
            ranges.put(bounds[i], bounds[i + 1]);
        }
        scale(controller, executor, stream, sealed, ranges);
    }

    /** A segment's id: its number in the low 32 bits, the epoch that created it in the high ones. */
    static long segmentId(int number, int epoch) {
        return ((long) epoch << 32) | number;
    }
}
