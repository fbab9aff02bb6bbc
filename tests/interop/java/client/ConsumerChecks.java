import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BooleanSupplier;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.errors.WakeupException;

/**
 * The Java consumer against Odradek: classic groups (eager range, cooperative-sticky,
 * static membership), KIP-848 groups (group.protocol=consumer), and seek,
 * offsetsForTimes, commitSync and committed.
 *
 * Usage: ConsumerChecks BOOTSTRAP BASE_TIMESTAMP
 */
public final class ConsumerChecks {
    static final int PARTITIONS = 4;
    static final int RECORDS = 80;
    static final int WAVE = 40;

    /** One group member polling on a thread of its own; its callbacks are recorded. */
    static final class Member implements Runnable, ConsumerRebalanceListener {
        final String name;
        final KafkaConsumer<String, String> consumer;
        final List<String> events = java.util.Collections.synchronizedList(new ArrayList<>());
        final Set<String> values = ConcurrentHashMap.newKeySet();
        final List<String> duplicates = java.util.Collections.synchronizedList(new ArrayList<>());
        volatile Set<Integer> assignment = Set.of();
        volatile int generation = -1;
        volatile String memberId = "";
        volatile int committed;  // how many values had been read at the last successful commit
        volatile boolean stop;
        volatile Throwable failure;
        final Thread thread;

        Member(String name, Properties props, String topic) {
            this.name = name;
            this.consumer = new KafkaConsumer<>(props);
            this.consumer.subscribe(List.of(topic), this);
            this.thread = new Thread(this, name);
            this.thread.start();
        }

        public void run() {
            try {
                while (!stop) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                        if (!values.add(r.value())) {
                            duplicates.add(r.value());
                        }
                    }
                    Set<Integer> now = new TreeSet<>();
                    for (TopicPartition tp : consumer.assignment()) {
                        now.add(tp.partition());
                    }
                    assignment = now;
                    generation = consumer.groupMetadata().generationId();
                    memberId = consumer.groupMetadata().memberId();
                    if (!values.isEmpty()) {
                        try {
                            int read = values.size();
                            consumer.commitSync();
                            committed = read;
                        } catch (RebalanceInProgressException e) {
                            // A cooperative rebalance is under way: poll again, then commit
                            // (what KafkaConsumer#commitSync's documentation tells users).
                            events.add("commit during rebalance");
                        }
                    }
                }
            } catch (WakeupException e) {
                // closing
            } catch (Throwable e) {
                failure = e;
                e.printStackTrace();
            }
        }

        static List<Integer> parts(Collection<TopicPartition> tps) {
            List<Integer> out = new ArrayList<>();
            for (TopicPartition tp : tps) {
                out.add(tp.partition());
            }
            java.util.Collections.sort(out);
            return out;
        }

        public void onPartitionsRevoked(Collection<TopicPartition> tps) {
            events.add("revoked " + parts(tps));
        }

        public void onPartitionsAssigned(Collection<TopicPartition> tps) {
            events.add("assigned " + parts(tps));
        }

        public void onPartitionsLost(Collection<TopicPartition> tps) {
            events.add("lost " + parts(tps));
        }

        /** Stops polling and closes (a static member does not leave the group). */
        void close() throws InterruptedException {
            stop = true;
            thread.join(30_000);
            consumer.close(Duration.ofSeconds(20));
        }

        Map<String, Object> describe() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("assignment", new ArrayList<>(assignment));
            m.put("generation", generation);
            m.put("events", new ArrayList<>(events));
            m.put("records", values.size());
            m.put("second_wave", values.stream().filter(v -> v.startsWith("w")).sorted().toList());
            m.put("duplicates", new ArrayList<>(duplicates));
            m.put("failure", failure == null ? null : failure.toString());
            return m;
        }
    }

    static boolean waitFor(long millis, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.currentTimeMillis() + millis;
        while (System.currentTimeMillis() < deadline) {
            if (condition.getAsBoolean()) {
                return true;
            }
            Thread.sleep(100);
        }
        return condition.getAsBoolean();
    }

    /** Every partition owned by exactly one member. */
    static boolean disjointCover(List<Member> members) {
        Set<Integer> seen = new HashSet<>();
        int total = 0;
        for (Member m : members) {
            seen.addAll(m.assignment);
            total += m.assignment.size();
        }
        return seen.size() == PARTITIONS && total == PARTITIONS;
    }

    static boolean allRead(List<Member> members) {
        Set<String> all = new HashSet<>();
        for (Member m : members) {
            all.addAll(m.values);
        }
        return all.size() == RECORDS;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        long baseTs = Long.parseLong(args[1]);
        String topic = "java-group-topic";
        for (String t : new String[] {topic, "java-eager", "java-coop", "java-kip848"}) {
            fill(bootstrap, t);
        }
        try (Admin admin = Admin.create(Common.admin(bootstrap))) {
            Common.createTopic(admin, "java-seek", 1);
        }
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(Common.producer(bootstrap))) {
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>("java-seek", 0, baseTs + i * 1000L, "k" + i, "s" + i));
            }
            producer.flush();
        }
        Common.check("classic-eager", () -> twoMembers(bootstrap, "java-eager", "java-eager", RangeAssignor.class.getName(), "classic"));
        Common.check("classic-cooperative", () -> twoMembers(bootstrap, "java-coop", "java-coop",
                CooperativeStickyAssignor.class.getName(), "classic"));
        Common.check("consumer-protocol", () -> twoMembers(bootstrap, "java-kip848", "java-kip848", null, "consumer"));
        Common.check("static-membership", () -> staticMembership(bootstrap, topic));
        Common.check("seek", () -> seek(bootstrap, baseTs));
        Common.printResult();
    }

    /** A topic of PARTITIONS partitions with RECORDS records, v0..v79, round robin. */
    static void fill(String bootstrap, String topic) throws Exception {
        try (Admin admin = Admin.create(Common.admin(bootstrap))) {
            Common.createTopic(admin, topic, PARTITIONS);
        }
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(Common.producer(bootstrap))) {
            for (int i = 0; i < RECORDS; i++) {
                producer.send(new ProducerRecord<>(topic, i % PARTITIONS, "k" + i, "v" + i));
            }
            producer.flush();
        }
    }

    static Properties memberProps(String bootstrap, String group, String assignor, String protocol) {
        Properties p = Common.consumer(bootstrap, group);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        if (protocol.equals("classic")) {
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor);
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        }
        return p;
    }

    /** A joins alone and reads; B joins: both own a disjoint half; together they read all. */
    static Object twoMembers(String bootstrap, String topic, String group, String assignor, String protocol)
            throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        Member a = new Member(group + "-a", memberProps(bootstrap, group, assignor, protocol), topic);
        Member b = null;
        try {
            out.put("a_alone_owns_all", waitFor(60_000, () -> a.assignment.size() == PARTITIONS));
            out.put("a_read_all_alone", waitFor(60_000, () -> a.values.size() == RECORDS));
            out.put("a_committed_all", waitFor(30_000, () -> a.committed == RECORDS));
            a.events.add("-- b joins --");
            b = new Member(group + "-b", memberProps(bootstrap, group, assignor, protocol), topic);
            Member bb = b;
            out.put("split", waitFor(90_000, () -> disjointCover(List.of(a, bb))
                    && a.assignment.size() == 2 && bb.assignment.size() == 2));
            // A second wave after the split: each member reads its own partitions' records.
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(Common.producer(bootstrap))) {
                for (int i = 0; i < WAVE; i++) {
                    producer.send(new ProducerRecord<>(topic, i % PARTITIONS, "k" + i, String.format("w%03d", i)));
                }
                producer.flush();
            }
            out.put("second_wave_read", waitFor(60_000, () -> a.values.size() + bb.values.size() == RECORDS + WAVE));
            Thread.sleep(1000);  // let late callbacks land
            out.put("described", describeGroup(bootstrap, group));
            out.put("a", a.describe());
            out.put("b", b.describe());
        } finally {
            a.close();
            if (b != null) {
                b.close();
            }
        }
        return out;
    }

    /** The group as the AdminClient describes it: type, state, each member's partitions. */
    static Map<String, Object> describeGroup(String bootstrap, String group) throws Exception {
        try (Admin admin = Admin.create(Common.admin(bootstrap))) {
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("type", d.type().toString());
            out.put("state", d.groupState().toString());
            List<List<Integer>> assignments = new ArrayList<>();
            for (MemberDescription m : d.members()) {
                assignments.add(Member.parts(m.assignment().topicPartitions()));
            }
            assignments.sort(java.util.Comparator.comparing(Object::toString));
            out.put("assignments", assignments);
            out.put("assignor", d.partitionAssignor());
            return out;
        }
    }

    /** Two static members; one closes (no LeaveGroup) and comes back within the session. */
    static Object staticMembership(String bootstrap, String topic) throws Exception {
        String group = "java-static";
        Map<String, Object> out = new LinkedHashMap<>();
        Properties p1 = memberProps(bootstrap, group, RangeAssignor.class.getName(), "classic");
        p1.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "java-static-1");
        p1.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000");
        Properties p2 = new Properties();
        p2.putAll(p1);
        p2.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "java-static-2");
        Member one = new Member("static-1", p1, topic);
        Member two = new Member("static-2", p2, topic);
        Member back = null;
        try {
            out.put("split", waitFor(90_000, () -> disjointCover(List.of(one, two))
                    && one.assignment.size() == 2 && two.assignment.size() == 2));
            out.put("read_all", waitFor(60_000, () -> allRead(List.of(one, two))));
            Thread.sleep(1000);
            out.put("before", Map.of("one", one.describe(), "two", two.describe()));
            one.events.add("-- two restarts --");
            List<Integer> twoHad = new ArrayList<>(two.assignment);
            two.close();
            Thread.sleep(1000);
            back = new Member("static-2-again", p2, topic);
            Member bk = back;
            out.put("back_assigned", waitFor(60_000, () -> bk.assignment.size() == 2));
            Thread.sleep(3000);  // a rebalance, if one were started, would show in one's callbacks
            out.put("two_had", twoHad);
            out.put("after", Map.of("one", one.describe(), "back", back.describe()));
        } finally {
            one.close();
            if (back != null) {
                back.close();
            }
        }
        return out;
    }

    static Object seek(String bootstrap, long baseTs) throws Exception {
        TopicPartition tp = new TopicPartition("java-seek", 0);
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Common.consumer(bootstrap, "java-seek-group"))) {
            c.assign(List.of(tp));
            Map<TopicPartition, OffsetAndTimestamp> times = c.offsetsForTimes(Map.of(tp, baseTs + 5500));
            OffsetAndTimestamp t = times.get(tp);
            out.put("for_time", t == null ? null : List.of(t.offset(), t.timestamp()));
            Map<TopicPartition, OffsetAndTimestamp> past = c.offsetsForTimes(Map.of(tp, baseTs + 60_000));
            out.put("for_time_after_end", past.get(tp) == null ? null : past.get(tp).offset());
            Map<TopicPartition, OffsetAndTimestamp> before = c.offsetsForTimes(Map.of(tp, 0L));
            out.put("for_time_zero", before.get(tp) == null ? null : before.get(tp).offset());
            out.put("beginning", c.beginningOffsets(List.of(tp)).get(tp));
            out.put("end", c.endOffsets(List.of(tp)).get(tp));
            c.seek(tp, 3);
            List<Long> offsets = new ArrayList<>();
            List<String> values = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 30_000;
            while (offsets.size() < 7 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    offsets.add(r.offset());
                    values.add(r.value());
                }
            }
            out.put("after_seek_offsets", offsets);
            out.put("after_seek_values", values);
            out.put("position", c.position(tp));
            out.put("committed_before", c.committed(java.util.Set.of(tp)).get(tp) == null ? null : "present");
            c.commitSync(Map.of(tp, new OffsetAndMetadata(7, "java-meta")));
            OffsetAndMetadata committed = c.committed(java.util.Set.of(tp)).get(tp);
            out.put("committed", List.of(committed.offset(), committed.metadata()));
            c.seek(tp, t == null ? 0 : t.offset());
            var again = c.poll(Duration.ofMillis(5000));
            out.put("after_seek_to_time_first", again.isEmpty() ? null : again.iterator().next().offset());
        }
        // A new consumer of the group resumes from the committed offset.
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Common.consumer(bootstrap, "java-seek-group"))) {
            c.assign(List.of(tp));
            List<Long> offsets = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 30_000;
            while (offsets.size() < 3 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    offsets.add(r.offset());
                }
            }
            out.put("resumed_offsets", offsets);
        }
        return out;
    }
}
