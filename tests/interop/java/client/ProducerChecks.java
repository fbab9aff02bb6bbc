import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeader;

/**
 * The Java producer against Odradek: every codec with keys, headers and timestamps (read
 * back with assign), the idempotent producer (acks=all), and a consume-transform-produce
 * transaction with sendOffsetsToTransaction, then an aborted one, then a committed one;
 * read_committed and read_uncommitted consumers read the output.
 *
 * Usage: ProducerChecks BOOTSTRAP BASE_TIMESTAMP
 */
public final class ProducerChecks {
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final int PER_CODEC = 40;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        long baseTs = Long.parseLong(args[1]);
        try (Admin admin = Admin.create(Common.admin(bootstrap))) {
            for (String codec : CODECS) {
                Common.check("codec-" + codec, () -> codec(admin, bootstrap, codec, baseTs));
            }
            Common.check("idempotence", () -> idempotence(admin, bootstrap));
            Common.check("transactions", () -> transactions(admin, bootstrap));
        }
        Common.printResult();
    }

    static Object codec(Admin admin, String bootstrap, String codec, long baseTs) throws Exception {
        String topic = "java-codec-" + codec;
        Common.createTopic(admin, topic, 1);
        Properties p = Common.producer(bootstrap);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "100");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "1000000");
        List<Long> offsets = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < PER_CODEC; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, 0, baseTs + i,
                        "key-" + i, codec + "-value-" + i + "-" + "odradek ".repeat(10));
                r.headers().add(new RecordHeader("index", Integer.toString(i).getBytes()));
                r.headers().add(new RecordHeader("codec", codec.getBytes()));
                sent.add(producer.send(r));
            }
            producer.flush();
            for (java.util.concurrent.Future<RecordMetadata> f : sent) {
                offsets.add(f.get().offset());
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("offsets", offsets);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Common.consumer(bootstrap, null))) {
            List<Map<String, Object>> records = new ArrayList<>();
            for (ConsumerRecord<String, String> r : Common.readAll(c, List.of(new TopicPartition(topic, 0)), PER_CODEC)) {
                records.add(Common.recordMap(r));
            }
            out.put("records", records);
        }
        return out;
    }

    static Object idempotence(Admin admin, String bootstrap) throws Exception {
        String topic = "java-idempotent";
        Common.createTopic(admin, topic, 2);
        Properties p = Common.producer(bootstrap);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "2000");
        Map<Integer, List<Long>> offsets = new HashMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < 400; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, i % 2, "k" + i, "idem-" + i)));
            }
            producer.flush();
            for (java.util.concurrent.Future<RecordMetadata> f : sent) {
                RecordMetadata m = f.get();
                offsets.computeIfAbsent(m.partition(), k -> new ArrayList<>()).add(m.offset());
            }
        }
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Common.consumer(bootstrap, null))) {
            for (ConsumerRecord<String, String> r : Common.readAll(c,
                    List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1)), 400)) {
                values.add(r.partition() + ":" + r.offset() + ":" + r.value());
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("offsets", offsets);
        out.put("values", values);
        return out;
    }

    static Object transactions(Admin admin, String bootstrap) throws Exception {
        String in = "java-txn-in", out = "java-txn-out", group = "java-ctp";
        Common.createTopic(admin, in, 1);
        Common.createTopic(admin, out, 2);
        try (KafkaProducer<String, String> plain = new KafkaProducer<>(Common.producer(bootstrap))) {
            for (int i = 0; i < 10; i++) {
                plain.send(new ProducerRecord<>(in, 0, "k" + i, "in-" + i));
            }
            plain.flush();
        }
        Properties p = Common.producer(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-ctp-txn");
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
        Properties cp = Common.consumer(bootstrap, group);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5");
        Map<String, Object> result = new LinkedHashMap<>();
        List<Long> committedAfter = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p);
             KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            producer.initTransactions();
            consumer.subscribe(List.of(in));
            int transformed = 0;
            long deadline = System.currentTimeMillis() + 60_000;
            // Consume-transform-produce, one transaction per poll (5 records each).
            while (transformed < 10 && System.currentTimeMillis() < deadline) {
                var records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    producer.send(new ProducerRecord<>(out, transformed % 2, r.key(), r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    transformed++;
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                producer.commitTransaction();
                committedAfter.add(offsets.get(new TopicPartition(in, 0)).offset());
            }
            // An aborted transaction: records and offsets never visible to read_committed.
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(out, 0, "x", "ABORTED-0"));
            producer.send(new ProducerRecord<>(out, 1, "x", "ABORTED-1"));
            producer.sendOffsetsToTransaction(Map.of(new TopicPartition(in, 0), new OffsetAndMetadata(1)),
                    consumer.groupMetadata());
            producer.flush();
            producer.abortTransaction();
            // And one more committed after the abort.
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(out, 0, "y", "AFTER-ABORT"));
            producer.commitTransaction();
        }
        result.put("committed_after_each", committedAfter);
        Map<TopicPartition, OffsetAndMetadata> groupOffsets = admin.listConsumerGroupOffsets(
                Map.of(group, new ListConsumerGroupOffsetsSpec())).partitionsToOffsetAndMetadata(group).get();
        Map<String, Long> g = new LinkedHashMap<>();
        groupOffsets.forEach((tp, om) -> g.put(tp.toString(), om.offset()));
        result.put("group_offsets", g);
        List<TopicPartition> outParts = List.of(new TopicPartition(out, 0), new TopicPartition(out, 1));
        for (String level : new String[] {"read_committed", "read_uncommitted"}) {
            Properties rp = Common.consumer(bootstrap, null);
            rp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, level);
            List<String> values = new ArrayList<>();
            Map<String, Long> ends = new LinkedHashMap<>();
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(rp)) {
                int expected = level.equals("read_committed") ? 11 : 13;
                for (ConsumerRecord<String, String> r : Common.readAll(c, outParts, expected)) {
                    values.add(r.value());
                }
                c.endOffsets(outParts).forEach((tp, o) -> ends.put(tp.toString(), o));
            }
            java.util.Collections.sort(values);
            result.put(level, values);
            result.put(level + "_end_offsets", ends);
        }
        return result;
    }
}
