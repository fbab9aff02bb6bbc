import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * A Kafka Streams application for tests/interop/test_kafka_streams.py.
 *
 * Topology:
 *   events (key: event id, value "user,amount", explicit timestamps)
 *     -> selectKey(user)                       a new key: Streams repartitions (by-user)
 *     -> join(users table, amount * tier)       stream-table join against a KTable
 *     -> groupByKey -> 10 s tumbling windows (grace 1 h) -> aggregate "count,sum"
 *     -> output (key "user@windowStart", value "count,sum"), every update (no cache)
 *   users (key: user, value: tier) -> KTable (store users-store)
 *
 * Runs until SIGTERM (a clean close) or SIGKILL. Prints "STATE old->new", "PROCESSED n"
 * and, on a fatal error, "FATAL ..." (then exits 1).
 *
 * Args: --bootstrap B --app-id ID --state-dir DIR --events T --users T --output T
 *       [--exactly-once] [--slow-ms N] [--threads N] [--group-protocol classic|streams]
 */
public final class StreamsApp {
    static final long WINDOW_MS = 10_000;
    static final Duration GRACE = Duration.ofHours(1);

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            if (a.equals("--exactly-once")) {
                args.put("exactly-once", "true");
            } else if (a.startsWith("--") && i + 1 < argv.length) {
                args.put(a.substring(2), argv[++i]);
            } else {
                throw new IllegalArgumentException("bad argument " + a);
            }
        }
        String events = args.get("events");
        String users = args.get("users");
        String output = args.get("output");
        long slowMs = Long.parseLong(args.getOrDefault("slow-ms", "0"));

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("app-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, args.get("state-dir"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
              args.containsKey("exactly-once") ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(args.getOrDefault("threads", "1")));
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        // No record cache: every update of a window goes out (and into its changelog) at
        // once, inside the open transaction, so a crash leaves records to abort.
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 3000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 500);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 5_000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.METADATA_MAX_AGE_CONFIG), 2000);
        // Small polls: with --slow-ms a thread processes what one poll returned before it
        // polls again, and only a poll completes a rebalance (commits wait for it). A
        // 1000-record poll at 3 ms a record would hold a transaction open past its timeout.
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_RECORDS_CONFIG), 100);

        if (args.containsKey("group-protocol")) {  // "classic" (the default) or "streams"
            p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, args.get("group-protocol"));
        }

        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, String> tiers = builder.table(users, Consumed.with(Serdes.String(), Serdes.String()),
                Materialized.as("users-store"));
        AtomicLong seen = new AtomicLong();
        KStream<String, String> byUser = builder.stream(events, Consumed.with(Serdes.String(), Serdes.String()))
                .selectKey((k, v) -> v.split(",")[0]);
        byUser.join(tiers, (v, tier) -> Long.toString(Long.parseLong(v.split(",")[1]) * Long.parseLong(tier)),
                        Joined.with(Serdes.String(), Serdes.String(), Serdes.String()).withName("by-user"))
                .peek((k, v) -> {
                    if (slowMs > 0) {  // the downstream side: output grows gradually
                        try {
                            Thread.sleep(slowMs);
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                    }
                    long n = seen.incrementAndGet();
                    if (n % 100 == 0) {
                        System.out.println("PROCESSED " + n);
                    }
                })
                .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), GRACE))
                .aggregate(() -> "0,0", (user, amount, agg) -> {
                    String[] cs = agg.split(",");
                    return (Long.parseLong(cs[0]) + 1) + "," + (Long.parseLong(cs[1]) + Long.parseLong(amount));
                }, Materialized.as("totals"))
                .toStream()
                .map((wk, v) -> KeyValue.pair(wk.key() + "@" + wk.window().start(), v))
                .to(output, Produced.with(Serdes.String(), Serdes.String()));

        Topology topology = builder.build();
        System.out.println("TOPOLOGY " + topology.describe().toString().replace('\n', ' '));
        KafkaStreams streams = new KafkaStreams(topology, p);
        CountDownLatch stopped = new CountDownLatch(1);
        AtomicReference<Throwable> fatal = new AtomicReference<>();
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + before + "->" + now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            fatal.set(e);
            System.out.println("FATAL " + e);
            e.printStackTrace();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            System.out.println("CLOSED");
            System.out.flush();
        }));
        streams.start();
        stopped.await();
        System.out.flush();
        if (fatal.get() != null) {
            Runtime.getRuntime().halt(1);
        }
    }
}
