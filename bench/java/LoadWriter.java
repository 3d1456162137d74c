import io.pravega.client.ClientConfig;
import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.impl.ByteBufferSerializer;

import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * bench/beside_pravega.py's Java load generator: one writer of Pravega's Java client writes
 * {@code count} events of {@code size} bytes on one routing key as fast as the client takes them,
 * then flushes (the acknowledgement of all of them). The clock runs from the first write to the
 * end of the flush. Prints one JSON line. Run as a source file (Java 11+): java -cp CLASSPATH
 * bench/java/LoadWriter.java URI SCOPE STREAM COUNT SIZE START_AT_EPOCH_MS
 */
public final class LoadWriter {
    private LoadWriter() {
    }

    public static void main(String[] args) throws Exception {
        URI controller = URI.create(args[0]);
        String scope = args[1];
        String stream = args[2];
        int count = Integer.parseInt(args[3]);
        int size = Integer.parseInt(args[4]);
        long startAtMillis = Long.parseLong(args[5]);
        byte[] payload = new byte[size];
        Arrays.fill(payload, (byte) 'x');
        ClientConfig config = ClientConfig.builder().controllerURI(controller).build();
        try (EventStreamClientFactory factory = EventStreamClientFactory.withScope(scope, config);
             EventStreamWriter<ByteBuffer> writer = factory.createEventWriter(stream, new ByteBufferSerializer(),
                     EventWriterConfig.builder().build())) {
            // Connected and set up before the clock starts, as the Python client's writer is.
            writer.writeEvent("k", ByteBuffer.wrap("warm".getBytes(StandardCharsets.UTF_8))).join();
            long pause = startAtMillis - System.currentTimeMillis();
            if (pause > 0) {
                Thread.sleep(pause);
            }
            long late = Math.max(0, -pause);
            long started = System.nanoTime();
            for (int i = 0; i < count; i++) {
                byte[] head = Integer.toString(i).getBytes(StandardCharsets.UTF_8);
                byte[] event = payload.clone();
                System.arraycopy(head, 0, event, 0, Math.min(head.length, size));
                writer.writeEvent("k", ByteBuffer.wrap(event));
            }
            writer.flush();
            double seconds = (System.nanoTime() - started) / 1e9;
            System.out.println("{\"written\": " + count + ", \"seconds\": " + seconds + ", \"late_s\": " + late / 1000.0 + "}");
        }
    }
}
