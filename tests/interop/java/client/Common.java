import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;

import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Shared by the Java client checks: client settings, a JSON result, record dumps. */
final class Common {
    private Common() {}

    /** Each check's answer (or its error class and message), printed as one JSON line. */
    static final Map<String, Object> RESULT = new LinkedHashMap<>();

    static void check(String name, Callable<Object> body) {
        long start = System.nanoTime();
        try {
            RESULT.put(name, body.call());
        } catch (Throwable e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            Map<String, Object> err = new LinkedHashMap<>();
            err.put("error", cause.getClass().getName());
            err.put("message", String.valueOf(cause.getMessage()));
            RESULT.put(name, err);
            e.printStackTrace();
        }
        System.err.printf("check %s took %d ms%n", name, (System.nanoTime() - start) / 1_000_000);
    }

    static void printResult() throws Exception {
        System.out.println("RESULT " + new ObjectMapper().writeValueAsString(RESULT));
        System.out.flush();
    }

    static Properties admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    static Properties producer(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        return p;
    }

    static Properties consumer(String bootstrap, String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        return p;
    }

    static void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
    }

    static Map<String, Object> recordMap(ConsumerRecord<String, String> r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("partition", r.partition());
        m.put("offset", r.offset());
        m.put("key", r.key());
        m.put("value", r.value());
        m.put("timestamp", r.timestamp());
        Map<String, String> headers = new LinkedHashMap<>();
        for (Header h : r.headers()) {
            headers.put(h.key(), h.value() == null ? null : new String(h.value()));
        }
        m.put("headers", headers);
        return m;
    }

    /** Reads the given partitions from the beginning until ``expected`` records (or 30 s). */
    static List<ConsumerRecord<String, String>> readAll(KafkaConsumer<String, String> consumer,
            Collection<TopicPartition> partitions, int expected) {
        consumer.assign(partitions);
        consumer.seekToBeginning(partitions);
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 30_000;
        while (out.size() < expected && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : consumer.poll(java.time.Duration.ofMillis(200))) {
                out.add(r);
            }
        }
        // A short extra poll: more than expected would be a bug too.
        for (ConsumerRecord<String, String> r : consumer.poll(java.time.Duration.ofMillis(300))) {
            out.add(r);
        }
        return out;
    }
}
