package io.pgcontroller.conformance;

import io.pravega.client.ClientConfig;
import io.pravega.client.EventStreamClientFactory;
import io.pravega.client.admin.ReaderGroupManager;
import io.pravega.client.admin.StreamManager;
import io.pravega.client.stream.EventRead;
import io.pravega.client.stream.EventStreamReader;
import io.pravega.client.stream.EventStreamWriter;
import io.pravega.client.stream.EventWriterConfig;
import io.pravega.client.stream.ReaderConfig;
import io.pravega.client.stream.ReaderGroupConfig;
import io.pravega.client.stream.ScalingPolicy;
import io.pravega.client.stream.Serializer;
import io.pravega.client.stream.Stream;
import io.pravega.client.stream.StreamConfiguration;
import io.pravega.schemaregistry.client.SchemaRegistryClient;
import io.pravega.schemaregistry.client.SchemaRegistryClientConfig;
import io.pravega.schemaregistry.client.SchemaRegistryClientFactory;
import io.pravega.schemaregistry.client.exceptions.RegistryExceptions;
import io.pravega.schemaregistry.contract.data.CodecType;
import io.pravega.schemaregistry.contract.data.Compatibility;
import io.pravega.schemaregistry.contract.data.GroupProperties;
import io.pravega.schemaregistry.contract.data.SchemaInfo;
import io.pravega.schemaregistry.contract.data.SchemaWithVersion;
import io.pravega.schemaregistry.contract.data.SerializationFormat;
import io.pravega.schemaregistry.contract.data.VersionInfo;
import io.pravega.schemaregistry.serializer.avro.schemas.AvroSchema;
import io.pravega.schemaregistry.serializer.shared.codec.Codec;
import io.pravega.schemaregistry.serializer.shared.codec.Codecs;
import io.pravega.schemaregistry.serializer.shared.impl.SerializerConfig;
import io.pravega.schemaregistry.serializers.SerializerFactory;
import java.net.URI;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.stream.Collectors;
import org.apache.avro.Schema;
import org.apache.avro.SchemaBuilder;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;

/**
 * Pravega's Schema Registry 0.5.0, which keeps its groups, schemas and encodings in table
 * segments of the controller's segment store, used the way an application uses it: an Avro group
 * with backward compatibility, a schema and a compatible evolution of it registered, an
 * incompatible one refused, and events of both versions written to a Pravega stream through the
 * registry's serializers (the second version's compressed with gzip, a codec registered for it).
 * Phase {@code write} does all that; phase {@code read}, run after the registry and the controller
 * restarted, finds the same group, versions, codecs and compatibility policy, and reads every
 * event back through the registry's deserializers, with the schema it was written with and with
 * the newest one. Not a {@code *Checks} class: it needs a registry, which the suite's runner does
 * not start (tests/conformance/test_schema_registry.py does). Exits 0 when every step held, else
 * 1 with the step that did not.
 */
public final class SchemaRegistryScenario {
    private static final String USAGE = "usage: java -cp <class path> io.pgcontroller.conformance.SchemaRegistryScenario"
            + " --registry http://host:port --controller tcp://host:port --scope SCOPE --phase write|read";
    private static final String GROUP = "readings";
    private static final String STREAM = "readings";
    private static final int EVENTS_PER_VERSION = 5;
    private static final long READ_TIMEOUT_MS = 30_000;

    /** Version 0: a sensor reading. */
    static final Schema V1 = SchemaBuilder.record("Reading").namespace("io.pgcontroller.conformance").fields()
            .requiredString("id")
            .requiredInt("value")
            .endRecord();
    /** Version 1: a field with a default added, so a reader of it reads version 0's events (backward compatible). */
    static final Schema V2 = SchemaBuilder.record("Reading").namespace("io.pgcontroller.conformance").fields()
            .requiredString("id")
            .requiredInt("value")
            .name("unit").type().stringType().stringDefault("C")
            .endRecord();
    /** A field without a default added: a reader of it cannot read version 1's events, so backward refuses it. */
    static final Schema INCOMPATIBLE = SchemaBuilder.record("Reading").namespace("io.pgcontroller.conformance").fields()
            .requiredString("id")
            .requiredInt("value")
            .name("unit").type().stringType().stringDefault("C")
            .requiredString("sensor")
            .endRecord();

    private static final GroupProperties GROUP_PROPERTIES =
            new GroupProperties(SerializationFormat.Avro, Compatibility.backward(), false);

    private final SchemaRegistryClient registry;
    private final ClientConfig clientConfig;
    private final String scope;
    private final List<String> steps = new ArrayList<>();

    private SchemaRegistryScenario(SchemaRegistryClient registry, ClientConfig clientConfig, String scope) {
        this.registry = registry;
        this.clientConfig = clientConfig;
        this.scope = scope;
    }

    public static void main(String[] args) {
        Map<String, String> options = parse(args);
        for (String required : List.of("registry", "controller", "scope", "phase")) {
            if (!options.containsKey(required)) {
                System.err.println(USAGE);
                System.exit(2);
            }
        }
        String phase = options.get("phase");
        SchemaRegistryClientConfig registryConfig = SchemaRegistryClientConfig.builder()
                .schemaRegistryUri(URI.create(options.get("registry"))).build();
        ClientConfig clientConfig = ClientConfig.builder().controllerURI(URI.create(options.get("controller"))).build();
        int code = 1;
        SchemaRegistryClient registry = SchemaRegistryClientFactory.withDefaultNamespace(registryConfig);
        try {
            SchemaRegistryScenario scenario = new SchemaRegistryScenario(registry, clientConfig, options.get("scope"));
            switch (phase) {
                case "write" -> scenario.write();
                case "read" -> scenario.read();
                default -> throw new IllegalArgumentException("unknown phase " + phase + "\n" + USAGE);
            }
            System.out.println("schema registry scenario: phase " + phase + " passed: " + String.join("; ", scenario.steps));
            code = 0;
        } catch (Throwable e) {
            System.err.println("schema registry scenario: phase " + phase + " FAILED: " + e);
            e.printStackTrace();
        } finally {
            close(registry);
        }
        // The clients' thread pools would keep the JVM alive.
        System.exit(code);
    }

    private static void close(SchemaRegistryClient registry) {
        try {
            registry.close();
        } catch (Exception e) {
            System.err.println("closing the registry client: " + e);
        }
    }

    private static Map<String, String> parse(String[] args) {
        Map<String, String> options = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("expected an option, got " + args[i] + "\n" + USAGE);
            }
            options.put(args[i].substring(2), args[i + 1]);
        }
        return options;
    }

    // ---------------------------------------------------------------- phase write

    private void write() throws Exception {
        Ctx.require(registry.addGroup(GROUP, GROUP_PROPERTIES), "addGroup of a new group answers true");
        Ctx.require(!registry.addGroup(GROUP, GROUP_PROPERTIES), "addGroup of an existing group answers false");
        step("group added (Avro, backward)");

        VersionInfo first = registry.addSchema(GROUP, schemaInfo(V1));
        VersionInfo second = registry.addSchema(GROUP, schemaInfo(V2));
        Ctx.equal(0, first.getVersion(), "the first schema's version");
        Ctx.equal(1, second.getVersion(), "the compatible evolution's version");
        Ctx.equal(first, registry.addSchema(GROUP, schemaInfo(V1)), "adding the first schema again (its version)");
        step("versions 0 and 1 added");

        requireIncompatibleRefused();
        step("an incompatible schema refused (409)");

        createStream();
        writeEvents(V1, 0, Codecs.None.getCodec());
        writeEvents(V2, EVENTS_PER_VERSION, Codecs.GzipCompressor.getCodec());
        step(2 * EVENTS_PER_VERSION + " events written, half with each version");
    }

    private void requireIncompatibleRefused() {
        // Not validateSchema: registry 0.5.0's client sends no compatibility policy with it, and
        // its server answers 500 (a NullPointerException decoding the missing policy).
        try {
            VersionInfo accepted = registry.addSchema(GROUP, schemaInfo(INCOMPATIBLE));
            throw new AssertionError("the incompatible schema was accepted as " + accepted);
        } catch (RegistryExceptions.SchemaValidationFailedException expected) {
            // The registry answered 409 Conflict, as it must under backward compatibility.
        }
    }

    private void createStream() {
        try (StreamManager streams = StreamManager.create(clientConfig)) {
            Ctx.require(streams.createScope(scope), "scope " + scope + " is new");
            // One segment: the events come back in the order they were written.
            Ctx.require(streams.createStream(scope, STREAM, StreamConfiguration.builder()
                    .scalingPolicy(ScalingPolicy.fixed(1)).build()), "stream " + STREAM + " is new");
        }
    }

    /** Writes the events numbered {@code from} onwards with {@code schema}, which must be registered. */
    private void writeEvents(Schema schema, int from, Codec codec) {
        SerializerConfig config = serializerConfig().encoder(codec).registerCodec(true).build();
        Serializer<GenericRecord> serializer = SerializerFactory.avroSerializer(config, AvroSchema.ofRecord(schema));
        try (EventStreamClientFactory clients = EventStreamClientFactory.withScope(scope, clientConfig);
             EventStreamWriter<GenericRecord> writer = clients.createEventWriter(STREAM, serializer,
                     EventWriterConfig.builder().build())) {
            for (GenericRecord event : expectedEvents().subList(from, from + EVENTS_PER_VERSION)) {
                writer.writeEvent(event.get("id").toString(), event).join();
            }
        }
    }

    // ---------------------------------------------------------------- phase read

    private void read() throws Exception {
        Ctx.equal(GROUP_PROPERTIES, registry.getGroupProperties(GROUP), "the group's properties");
        requireVersions();
        step("group, versions 0 and 1 found");

        Set<String> codecs = registry.getCodecTypes(GROUP).stream().map(CodecType::getName)
                .collect(Collectors.toCollection(TreeSet::new));
        // None is every group's from its start; gzip the second writer registered.
        Ctx.equal(new TreeSet<>(Set.of(Codecs.None.getCodec().getName(), Codecs.GzipCompressor.getCodec().getName())),
                codecs, "the group's codecs");
        step("codecs " + codecs);

        Ctx.require(registry.canReadUsing(GROUP, schemaInfo(V2)), "version 1 reads every version's events");
        Ctx.require(!registry.canReadUsing(GROUP, schemaInfo(INCOMPATIBLE)),
                "the incompatible schema cannot read the group's events");
        requireIncompatibleRefused();
        step("the incompatible schema still refused (409)");

        List<GenericRecord> expected = expectedEvents();
        Ctx.equal(expected, readAll(null), "the events read with the schemas they were written with");
        List<GenericRecord> asNewest = expected.stream().map(event -> project(event, V2)).toList();
        Ctx.equal(asNewest, readAll(V2), "the events read with version 1 (version 0's with the default unit)");
        step(expected.size() + " events read back with their writers' schemas and with version 1");
    }

    private void requireVersions() {
        List<SchemaWithVersion> versions = registry.getSchemaVersions(GROUP, null);
        Ctx.equal(2, versions.size(), "the group's schema versions (" + versions + ")");
        List<Schema> schemas = new ArrayList<>();
        for (int i = 0; i < versions.size(); i++) {
            Ctx.equal(i, versions.get(i).getVersionInfo().getVersion(), "the version number of schema " + i);
            schemas.add(new Schema.Parser().parse(
                    AvroSchema.from(versions.get(i).getSchemaInfo()).getSchema().toString()));
        }
        Ctx.equal(List.of(V1, V2), schemas, "the group's schemas, in the order they were added");
        Ctx.equal(1, registry.getLatestSchemaVersion(GROUP, null).getVersionInfo().getVersion(), "the latest version");
        Ctx.equal(0, registry.getVersionForSchema(GROUP, schemaInfo(V1)).getVersion(), "version 0's number");
        Ctx.equal(2, registry.getGroupHistory(GROUP).size(), "the group's history records");
    }

    /** Every event of the stream, read by a new reader group; {@code readerSchema} null reads each with its writer's. */
    private List<GenericRecord> readAll(Schema readerSchema) {
        SerializerConfig config = serializerConfig().build();
        Serializer<Object> deserializer = SerializerFactory.avroGenericDeserializer(config,
                readerSchema == null ? null : AvroSchema.of(readerSchema));
        String readerGroup = "rg-" + (readerSchema == null ? "writers" : "newest");
        List<GenericRecord> events = new ArrayList<>();
        try (ReaderGroupManager groups = ReaderGroupManager.withScope(scope, clientConfig)) {
            groups.createReaderGroup(readerGroup, ReaderGroupConfig.builder().stream(Stream.of(scope, STREAM)).build());
            try (EventStreamClientFactory clients = EventStreamClientFactory.withScope(scope, clientConfig);
                 EventStreamReader<Object> reader = clients.createReader("reader", readerGroup, deserializer,
                         ReaderConfig.builder().build())) {
                long deadline = System.currentTimeMillis() + READ_TIMEOUT_MS;
                while (events.size() < 2 * EVENTS_PER_VERSION && System.currentTimeMillis() < deadline) {
                    EventRead<Object> read = reader.readNextEvent(1000);
                    if (read.getEvent() != null) {
                        events.add((GenericRecord) read.getEvent());
                    }
                }
                // Nothing beyond what was written.
                EventRead<Object> extra = reader.readNextEvent(500);
                Ctx.require(extra.getEvent() == null, "no event beyond the written ones, got " + extra.getEvent());
            }
        }
        return events;
    }

    // ---------------------------------------------------------------- the events

    /** Events 0..4 of version 0 and 5..9 of version 1, the same in both phases. */
    static List<GenericRecord> expectedEvents() {
        List<GenericRecord> events = new ArrayList<>();
        for (int i = 0; i < 2 * EVENTS_PER_VERSION; i++) {
            boolean second = i >= EVENTS_PER_VERSION;
            GenericRecord event = new GenericData.Record(second ? V2 : V1);
            event.put("id", "reading-" + i);
            event.put("value", 7 * i - 20);
            if (second) {
                event.put("unit", i % 2 == 0 ? "F" : "K");
            }
            events.add(event);
        }
        return events;
    }

    /** The event as a reader of {@code schema} sees it: absent fields take their defaults. */
    private static GenericRecord project(GenericRecord event, Schema schema) {
        GenericRecord projected = new GenericData.Record(schema);
        Function<Schema.Field, Object> valueOf = field -> event.getSchema().getField(field.name()) != null
                ? event.get(field.name())
                : GenericData.get().getDefaultValue(field);
        schema.getFields().forEach(field -> projected.put(field.name(), valueOf.apply(field)));
        return projected;
    }

    private SerializerConfig.SerializerConfigBuilder serializerConfig() {
        return SerializerConfig.builder().groupId(GROUP).registryClient(registry);
    }

    private static SchemaInfo schemaInfo(Schema schema) {
        return AvroSchema.of(schema).getSchemaInfo();
    }

    private void step(String what) {
        steps.add(what);
    }
}
