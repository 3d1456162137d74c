package io.pgcontroller.conformance;

import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Runs every check against the controller under test and, when given, against Pravega (the
 * oracle), compares each check's outcome and observations, and prints one line per check and
 * the summary line {@code java conformance: N passed, M failed, K differ from Pravega (listed)}.
 * Exits 0 only when nothing failed. {@code --help} lists the options.
 */
public final class Main {
    private static final String USAGE = String.join("\n",
            "usage: java -cp <class path> io.pgcontroller.conformance.Main --controller URI [options]",
            "  --controller URI      the controller under test (tcp://host:9090, tls://..., pravega://...)",
            "  --oracle URI          Pravega's controller to compare with (the same profile's settings)",
            "  --profile NAME        plain (auth and TLS off, the default) or secure (auth and TLS on)",
            "  --user NAME --password P     credentials (secure profile)",
            "  --trust-store FILE    the CA certificate (PEM) the servers' certificates are signed by",
            "  --oracle-user, --oracle-password, --oracle-trust-store   the same for the oracle, if different",
            "  --listed FILE         docs/compatibility.md: the checks listed there may differ from Pravega",
            "  --only REGEX          run only checks whose name (Class.method) matches",
            "  --threads N           checks running at once (default 6)",
            "  --report FILE         one JSON line per check",
            "  --list                print the checks' names and exit");

    public static void main(String[] args) throws Exception {
        Map<String, String> options = parse(args);
        if (options.containsKey("help")) {
            System.out.println(USAGE);
            return;
        }
        String profile = options.getOrDefault("profile", "plain");
        Pattern only = Pattern.compile(options.getOrDefault("only", ".*"));
        List<Method> checks = new ArrayList<>();
        for (Method method : discover()) {
            if (method.getAnnotation(Check.class).profile().equals(profile) && only.matcher(name(method)).find()) {
                checks.add(method);
            }
        }
        if (options.containsKey("list")) {
            checks.forEach(method -> System.out.println(name(method)));
            return;
        }
        if (!options.containsKey("controller")) {
            System.err.println(USAGE);
            System.exit(2);
        }
        Server tested = new Server("serve", URI.create(options.get("controller")), options.get("user"),
                options.get("password"), options.get("trust-store"));
        Server oracle = options.containsKey("oracle")
                ? new Server("pravega", URI.create(options.get("oracle")),
                        options.getOrDefault("oracle-user", options.get("user")),
                        options.getOrDefault("oracle-password", options.get("password")),
                        options.getOrDefault("oracle-trust-store", options.get("trust-store")))
                : null;
        Set<String> listed = options.containsKey("listed") ? listedDifferences(Path.of(options.get("listed"))) : Set.of();
        int threads = Integer.parseInt(options.getOrDefault("threads", "6"));
        System.exit(run(checks, tested, oracle, listed, threads, options.get("report")));
    }

    private static final String TIMED_OUT = "did not end within ";

    private static int run(List<Method> checks, Server tested, Server oracle, Set<String> listed, int threads,
                           String report) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(threads, daemon("check"));
        ExecutorService watchers = Executors.newCachedThreadPool(daemon("watch"));
        Map<Method, Future<Outcome>> onTested = new LinkedHashMap<>();
        Map<Method, Future<Outcome>> onOracle = new LinkedHashMap<>();
        for (Method check : checks) {
            onTested.put(check, watchers.submit(() -> runOne(pool, check, tested)));
            if (oracle != null) {
                onOracle.put(check, watchers.submit(() -> runOne(pool, check, oracle)));
            }
        }
        int passed = 0;
        int failed = 0;
        int differ = 0;
        Set<String> sameButListed = new TreeSet<>();
        List<String> lines = new ArrayList<>();
        for (Method check : checks) {
            String name = name(check);
            Outcome mine = onTested.get(check).get();
            Outcome theirs = oracle == null ? null : onOracle.get(check).get();
            if (theirs != null && theirs.timedOut() && !theirs.sameAs(mine)) {
                // Pravega standalone's in-memory tier stalls now and then (it throttles when full):
                // the oracle gets one more run, alone, before its stall counts as its answer. A
                // check on serve is never run twice.
                System.out.println("RETRY    " + name + " on pravega: " + theirs.error());
                theirs = runOne(pool, check, oracle);
            }
            String verdict;
            if (!mine.passed()) {
                verdict = "failed";
                failed++;
            } else if (theirs == null || theirs.sameAs(mine)) {
                verdict = "passed";
                passed++;
                if (theirs != null && listed.contains(name)) {
                    sameButListed.add(name);
                }
            } else if (listed.contains(name)) {
                verdict = "differs (listed)";
                differ++;
            } else {
                verdict = "failed: differs from Pravega, not listed in docs/compatibility.md";
                failed++;
            }
            StringBuilder line = new StringBuilder(String.format("%-8s %s (%d ms)", verdict.startsWith("failed") ? "FAIL"
                    : verdict.startsWith("differs") ? "DIFFERS" : "PASS", name, mine.millis()));
            if (!mine.passed()) {
                line.append("\n    serve: ").append(mine.error());
            }
            if (theirs != null && !theirs.sameAs(mine)) {
                line.append("\n    serve:   ").append(mine.describe());
                line.append("\n    pravega: ").append(theirs.describe());
            }
            System.out.println(line);
            lines.add(json(name, verdict, mine, theirs));
        }
        if (report != null) {
            Files.write(Path.of(report), lines, StandardCharsets.UTF_8);
        }
        for (String name : sameButListed) {
            System.out.println("NOTE     " + name + " is listed in docs/compatibility.md but answers as Pravega now");
        }
        System.out.printf("java conformance: %d passed, %d failed, %d differ from Pravega (listed)%n", passed, failed, differ);
        pool.shutdownNow();
        watchers.shutdownNow();
        return failed == 0 ? 0 : 1;
    }

    private static Outcome runOne(ExecutorService pool, Method check, Server server) throws InterruptedException {
        Check annotation = check.getAnnotation(Check.class);
        Ctx ctx = new Ctx(server, name(check));
        // From the moment a thread of the pool takes the check: time spent queued is not its own.
        java.util.concurrent.atomic.AtomicLong start = new java.util.concurrent.atomic.AtomicLong();
        Future<?> running = pool.submit(() -> {
            start.set(System.nanoTime());
            Object instance = check.getDeclaringClass().getDeclaredConstructor().newInstance();
            try {
                check.invoke(instance, ctx);
            } catch (InvocationTargetException e) {
                if (e.getCause() instanceof Exception cause) {
                    throw cause;
                }
                throw new RuntimeException(e.getCause());
            }
            return null;
        });
        String error = null;
        try {
            // The time limit runs from when a thread takes the check: checks queued behind a
            // server that stalls must not time out for that server's sake.
            while (start.get() == 0 && !running.isDone()) {
                Thread.sleep(10);
            }
            running.get(annotation.timeoutSeconds(), TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            running.cancel(true);
            error = TIMED_OUT + annotation.timeoutSeconds() + " s";
        } catch (java.util.concurrent.ExecutionException e) {
            error = describe(e.getCause());
        } finally {
            Thread closer = new Thread(ctx::close, "close-" + ctx.checkName());
            closer.setDaemon(true);
            closer.start();
            closer.join(30_000);
        }
        long millis = start.get() == 0 ? 0 : (System.nanoTime() - start.get()) / 1_000_000;
        return new Outcome(error == null, error, error == null ? "" : errorClass(error), ctx.observations(), millis);
    }

    private static String describe(Throwable e) {
        StringBuilder text = new StringBuilder(e.getClass().getName() + ": " + e.getMessage());
        for (Throwable cause = e.getCause(); cause != null && cause != cause.getCause(); cause = cause.getCause()) {
            text.append(" <- ").append(cause.getClass().getName()).append(": ").append(cause.getMessage());
        }
        StackTraceElement[] stack = e.getStackTrace();
        for (StackTraceElement frame : stack) {
            if (frame.getClassName().startsWith("io.pgcontroller.")) {
                text.append(" at ").append(frame.getClassName().replace("io.pgcontroller.conformance.", ""))
                        .append('.').append(frame.getMethodName()).append(':').append(frame.getLineNumber());
                break;
            }
        }
        return text.toString();
    }

    private static String errorClass(String error) {
        int colon = error.indexOf(':');
        return colon < 0 ? error : error.substring(0, colon);
    }

    /** What the comparison looks at: whether it passed, the class it failed with, its observations. */
    record Outcome(boolean passed, String error, String errorClass, Map<String, String> observations, long millis) {
        boolean timedOut() {
            return !passed && error.startsWith(TIMED_OUT);
        }

        boolean sameAs(Outcome other) {
            return passed == other.passed && errorClass.equals(other.errorClass) && observations.equals(other.observations);
        }

        String describe() {
            return (passed ? "passed" : "failed " + error) + (observations.isEmpty() ? "" : " " + observations);
        }
    }

    /** The check names in the table of the section "Java conformance" of docs/compatibility.md. */
    static Set<String> listedDifferences(Path file) throws IOException {
        Set<String> names = new TreeSet<>();
        boolean inSection = false;
        Pattern row = Pattern.compile("^\\|\\s*`([A-Za-z]+Checks\\.[A-Za-z0-9_]+)`");
        for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
            if (line.startsWith("## ")) {
                inSection = line.toLowerCase().contains("java conformance");
            } else if (inSection) {
                var match = row.matcher(line);
                if (match.find()) {
                    names.add(match.group(1));
                }
            }
        }
        return names;
    }

    static String name(Method method) {
        return method.getDeclaringClass().getSimpleName() + "." + method.getName();
    }

    /** Every @Check method of the *Checks classes next to this one, in name order. */
    static List<Method> discover() throws Exception {
        Path location = Path.of(Main.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        List<String> classNames = new ArrayList<>();
        String packagePath = Main.class.getPackageName().replace('.', '/');
        if (Files.isDirectory(location)) {
            try (Stream<Path> files = Files.list(location.resolve(packagePath))) {
                files.map(path -> path.getFileName().toString()).forEach(classNames::add);
            }
        } else {
            try (var jar = new java.util.jar.JarFile(location.toFile())) {
                jar.stream().map(java.util.jar.JarEntry::getName)
                        .filter(entry -> entry.startsWith(packagePath + "/") && entry.indexOf('/', packagePath.length() + 1) < 0)
                        .map(entry -> entry.substring(packagePath.length() + 1))
                        .forEach(classNames::add);
            }
        }
        List<Method> methods = new ArrayList<>();
        for (String file : classNames) {
            if (!file.endsWith("Checks.class")) {
                continue;
            }
            Class<?> type = Class.forName(Main.class.getPackageName() + "." + file.substring(0, file.length() - 6));
            if (!Modifier.isPublic(type.getModifiers())) {
                continue;
            }
            for (Method method : type.getDeclaredMethods()) {
                if (method.isAnnotationPresent(Check.class)) {
                    methods.add(method);
                }
            }
        }
        methods.sort(Comparator.comparing(Main::name));
        return methods;
    }

    private static Map<String, String> parse(String[] args) {
        Map<String, String> options = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + args[i] + "\n" + USAGE);
            }
            String key = args[i].substring(2);
            if (key.equals("help") || key.equals("list")) {
                options.put(key, "");
            } else if (i + 1 < args.length) {
                options.put(key, args[++i]);
            } else {
                throw new IllegalArgumentException("--" + key + " needs a value\n" + USAGE);
            }
        }
        return options;
    }

    private static java.util.concurrent.ThreadFactory daemon(String prefix) {
        AtomicInteger count = new AtomicInteger();
        return runnable -> {
            Thread thread = new Thread(runnable, prefix + "-" + count.incrementAndGet());
            thread.setDaemon(true);
            return thread;
        };
    }

    private static String json(String name, String verdict, Outcome mine, Outcome theirs) {
        StringBuilder text = new StringBuilder("{");
        text.append("\"check\":").append(quote(name)).append(",\"verdict\":").append(quote(verdict));
        text.append(",\"serve\":").append(json(mine));
        text.append(",\"pravega\":").append(theirs == null ? "null" : json(theirs)).append('}');
        return text.toString();
    }

    private static String json(Outcome outcome) {
        StringBuilder text = new StringBuilder("{\"passed\":").append(outcome.passed());
        text.append(",\"error\":").append(outcome.error() == null ? "null" : quote(outcome.error()));
        text.append(",\"millis\":").append(outcome.millis()).append(",\"observations\":{");
        String separator = "";
        for (var entry : outcome.observations().entrySet()) {
            text.append(separator).append(quote(entry.getKey())).append(':').append(quote(entry.getValue()));
            separator = ",";
        }
        return text.append("}}").toString();
    }

    private static String quote(String value) {
        StringBuilder text = new StringBuilder("\"");
        for (char c : value.toCharArray()) {
            switch (c) {
                case '"' -> text.append("\\\"");
                case '\\' -> text.append("\\\\");
                case '\n' -> text.append("\\n");
                case '\r' -> text.append("\\r");
                case '\t' -> text.append("\\t");
                default -> {
                    if (c < 0x20) {
                        text.append(String.format("\\u%04x", (int) c));
                    } else {
                        text.append(c);
                    }
                }
            }
        }
        return text.append('"').toString();
    }
}
