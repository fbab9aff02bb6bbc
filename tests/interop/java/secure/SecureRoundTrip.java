import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * One round trip over a secured listener: create a topic (Admin), produce --records
 * records (acks=all, idempotent), read them back (assign + seekToBeginning).
 *
 *   SecureRoundTrip --bootstrap HOST:PORT --topic T [--records N] [--property key=value]...
 *
 * Every --property goes into the admin's, producer's and consumer's Properties
 * (security.protocol, ssl.truststore.*, sasl.mechanism, sasl.jaas.config...).
 * Prints RESULT {"produced":N,"consumed":[values]} or RESULT {"error":"Class: message"}.
 */
public final class SecureRoundTrip {
    private SecureRoundTrip() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = null;
        String topic = null;
        int records = 20;
        Properties common = new Properties();
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            String value = i + 1 < args.length ? args[i + 1] : null;
            switch (arg) {
                case "--bootstrap": bootstrap = value; i++; break;
                case "--topic": topic = value; i++; break;
                case "--records": records = Integer.parseInt(value); i++; break;
                case "--property": {
                    int eq = value.indexOf('=');
                    if (eq < 0) throw new IllegalArgumentException("--property needs key=value: " + value);
                    common.put(value.substring(0, eq), value.substring(eq + 1));
                    i++;
                    break;
                }
                default: throw new IllegalArgumentException("unknown argument " + arg);
            }
        }
        if (bootstrap == null || topic == null) {
            throw new IllegalArgumentException("--bootstrap and --topic are required");
        }
        common.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);

        Map<String, Object> result = new LinkedHashMap<>();
        try {
            roundTrip(common, topic, records, result);
        } catch (Throwable e) {
            Throwable cause = e;
            while (cause instanceof ExecutionException && cause.getCause() != null) {
                cause = cause.getCause();
            }
            e.printStackTrace();
            result.clear();
            result.put("error", cause.getClass().getName() + ": " + cause.getMessage());
        }
        System.out.println("RESULT " + new ObjectMapper().writeValueAsString(result));
        System.out.flush();
        System.exit(0);  // no lingering client threads
    }

    private static void roundTrip(Properties common, String topic, int records,
                                  Map<String, Object> result) throws Exception {
        Properties adminProps = new Properties();
        adminProps.putAll(common);
        adminProps.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        adminProps.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        try (Admin admin = Admin.create(adminProps)) {
            admin.createTopics(Collections.singleton(new NewTopic(topic, 1, (short) 1))).all().get();
        }

        Properties producerProps = new Properties();
        producerProps.putAll(common);
        producerProps.put(ProducerConfig.ACKS_CONFIG, "all");
        producerProps.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        producerProps.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        producerProps.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        producerProps.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        producerProps.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        producerProps.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        int produced = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps)) {
            List<java.util.concurrent.Future<?>> sends = new ArrayList<>();
            for (int i = 0; i < records; i++) {
                sends.add(producer.send(new ProducerRecord<>(topic, 0, "key-" + i, "value-" + i)));
            }
            producer.flush();
            for (java.util.concurrent.Future<?> send : sends) {
                send.get();
                produced++;
            }
        }

        Properties consumerProps = new Properties();
        consumerProps.putAll(common);
        consumerProps.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        consumerProps.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        consumerProps.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        consumerProps.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        List<String> consumed = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(Collections.singleton(tp));
            consumer.seekToBeginning(Collections.singleton(tp));
            long deadline = System.currentTimeMillis() + 30_000;
            while (consumed.size() < produced && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    consumed.add(r.value());
                }
            }
        }
        result.put("produced", produced);
        result.put("consumed", consumed);
    }
}
