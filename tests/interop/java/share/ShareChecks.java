import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;

import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * KIP-932 share groups ("queues for Kafka") with Kafka's 4.4 Java client:
 * KafkaShareConsumer and the share-group Admin calls. Each check prints facts (counts,
 * lists, exception class names), never asserts; the pytest module asserts on them. Every
 * poll loop ends by a deadline.
 *
 * Usage: ShareChecks --bootstrap HOST:PORT [--check NAME]... [--run ID]
 *                    [--records N] [--hold-seconds S] [--lock-ms MS]
 *
 * Checks (default: shared, explicit, delivery_limit, latest, admin, in that order):
 * - shared: 3 consumers, one group, one partition, 300 records, implicit acknowledgement.
 * - explicit: RELEASE the first record, REJECT the second, ACCEPT the rest, commitSync.
 * - delivery_limit: share.delivery.count.limit=2, one record released on every delivery.
 * - latest: the default share.auto.offset.reset (latest) against earliest.
 * - admin: listGroups, describeShareGroups, listShareGroupOffsets, alter/delete offsets,
 *   deleteShareGroups, on an active and on an empty group.
 * - hold: produce N records, poll once, print "HELD [offsets]", then sleep without
 *   acknowledging (the test SIGKILLs this JVM). Prints no RESULT unless it wakes up.
 * - drain: consume the hold group (same --run) until all N values are seen.
 *
 * Names: topic "st-CHECK-RUN", group "sg-CHECK-RUN" (hold and drain share "hold").
 * --lock-ms sets the group config share.record.lock.duration.ms of every group (none:
 * the broker's group.share.record.lock.duration.ms).
 */
public final class ShareChecks {
    static final ObjectMapper JSON = new ObjectMapper();
    static final Map<String, Object> RESULT = new LinkedHashMap<>();

    static String bootstrap;
    static String run;
    static int records = 50;
    static int holdSeconds = 120;
    static Integer lockMs;

    public static void main(String[] args) throws Exception {
        List<String> checks = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--bootstrap" -> bootstrap = args[++i];
                case "--check" -> checks.addAll(List.of(args[++i].split(",")));
                case "--run" -> run = args[++i];
                case "--records" -> records = Integer.parseInt(args[++i]);
                case "--hold-seconds" -> holdSeconds = Integer.parseInt(args[++i]);
                case "--lock-ms" -> lockMs = Integer.parseInt(args[++i]);
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (bootstrap == null) {
            throw new IllegalArgumentException("--bootstrap HOST:PORT is required");
        }
        if (run == null) {
            run = Long.toString(System.currentTimeMillis() % 1_000_000_000L, 36);
        }
        if (checks.isEmpty() || checks.contains("all")) {
            checks = List.of("shared", "explicit", "delivery_limit", "latest", "admin");
        }
        RESULT.put("run", run);
        RESULT.put("client_versions", clientVersions());
        for (String name : checks) {
            switch (name) {
                case "shared" -> check(name, ShareChecks::shared);
                case "explicit" -> check(name, ShareChecks::explicit);
                case "delivery_limit" -> check(name, ShareChecks::deliveryLimit);
                case "latest" -> check(name, ShareChecks::latest);
                case "admin" -> check(name, ShareChecks::adminCheck);
                case "hold" -> check(name, ShareChecks::hold);
                case "drain" -> check(name, ShareChecks::drain);
                default -> throw new IllegalArgumentException("unknown check " + name);
            }
        }
        System.out.println("RESULT " + JSON.writeValueAsString(RESULT));
        System.out.flush();
    }

    // -- plumbing ---------------------------------------------------------------------

    static void check(String name, Callable<Object> body) {
        long start = System.nanoTime();
        try {
            RESULT.put(name, body.call());
        } catch (Throwable e) {
            RESULT.put(name, error(e));
            e.printStackTrace();
        }
        System.err.printf("check %s took %d ms%n", name, (System.nanoTime() - start) / 1_000_000);
    }

    static Map<String, Object> error(Throwable e) {
        Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        Map<String, Object> err = new LinkedHashMap<>();
        err.put("error", cause.getClass().getName());
        err.put("message", String.valueOf(cause.getMessage()));
        return err;
    }

    /** An admin call's answer: {"ok": value} or {"error": class, "message": text}. */
    static Map<String, Object> attempt(Callable<Object> call) {
        try {
            Object value = call.call();
            Map<String, Object> ok = new LinkedHashMap<>();
            ok.put("ok", value);
            return ok;
        } catch (Throwable e) {
            return error(e);
        }
    }

    static Map<String, Object> clientVersions() {
        Map<String, Object> out = new LinkedHashMap<>();
        for (ApiKeys key : List.of(ApiKeys.SHARE_GROUP_HEARTBEAT, ApiKeys.SHARE_FETCH,
                ApiKeys.SHARE_ACKNOWLEDGE, ApiKeys.SHARE_GROUP_DESCRIBE,
                ApiKeys.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKeys.ALTER_SHARE_GROUP_OFFSETS,
                ApiKeys.DELETE_SHARE_GROUP_OFFSETS, ApiKeys.LIST_GROUPS, ApiKeys.DELETE_GROUPS,
                ApiKeys.INCREMENTAL_ALTER_CONFIGS, ApiKeys.FIND_COORDINATOR)) {
            out.put(key.name, List.of(key.oldestVersion(), key.latestVersion()));
        }
        return out;
    }

    static String topic(String check) {
        return "st-" + check + "-" + run;
    }

    static String group(String check) {
        return "sg-" + check + "-" + run;
    }

    static Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        return Admin.create(p);
    }

    static KafkaShareConsumer<String, String> consumer(String group, String mode, String clientId) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, mode);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "20");
        return new KafkaShareConsumer<>(p);
    }

    static void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
    }

    /** Group configs (ConfigResource.Type.GROUP), set before any member joins. */
    static void groupConfig(Admin admin, String group, Map<String, String> configs) throws Exception {
        Map<String, String> all = new LinkedHashMap<>(configs);
        if (lockMs != null) {
            all.put("share.record.lock.duration.ms", String.valueOf(lockMs));
        }
        if (all.isEmpty()) {
            return;
        }
        List<AlterConfigOp> ops = new ArrayList<>();
        for (Map.Entry<String, String> e : all.entrySet()) {
            ops.add(new AlterConfigOp(new ConfigEntry(e.getKey(), e.getValue()), AlterConfigOp.OpType.SET));
        }
        admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group), ops))
            .all().get();
    }

    /** Values "PREFIX-i" for i in [from, to), in batches of 10 (one flush each). */
    static void produce(String topic, String prefix, int from, int to) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = from; i < to; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + i, prefix + "-" + i));
                if ((i - from) % 10 == 9) {
                    producer.flush();
                }
            }
            producer.flush();
        }
    }

    static int deliveryCount(ConsumerRecord<String, String> r) {
        Optional<Short> count = r.deliveryCount();
        return count.isPresent() ? count.get() : -1;
    }

    static Map<String, Object> recordFact(ConsumerRecord<String, String> r, long began) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("offset", r.offset());
        m.put("value", r.value());
        m.put("delivery_count", deliveryCount(r));
        m.put("ms", System.currentTimeMillis() - began);
        return m;
    }

    static boolean waitFor(long millis, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.currentTimeMillis() + millis;
        while (System.currentTimeMillis() < deadline) {
            if (condition.getAsBoolean()) {
                return true;
            }
            Thread.sleep(200);
        }
        return condition.getAsBoolean();
    }

    static Map<String, Object> commitFact(Map<TopicIdPartition, Optional<KafkaException>> result) {
        Map<String, Object> out = new TreeMap<>();
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : result.entrySet()) {
            out.put(e.getKey().topic() + "-" + e.getKey().partition(),
                e.getValue().map(x -> (Object) x.getClass().getName()).orElse("ok"));
        }
        return out;
    }

    static Optional<ShareGroupDescription> describe(Admin admin, String group) {
        try {
            return Optional.of(admin.describeShareGroups(List.of(group)).all().get().get(group));
        } catch (Exception e) {
            return Optional.empty();
        }
    }

    static Map<String, Object> describeFact(ShareGroupDescription d) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("group", d.groupId());
        m.put("state", String.valueOf(d.groupState()));
        m.put("group_epoch", d.groupEpoch());
        m.put("target_assignment_epoch", d.targetAssignmentEpoch());
        m.put("coordinator", d.coordinator() == null ? null : d.coordinator().id());
        List<Map<String, Object>> members = new ArrayList<>();
        for (ShareMemberDescription md : d.members()) {
            Map<String, Object> mm = new LinkedHashMap<>();
            mm.put("client_id", md.clientId());
            mm.put("member_id_length", md.consumerId() == null ? 0 : md.consumerId().length());
            mm.put("host", md.host());
            mm.put("member_epoch", md.memberEpoch());
            List<String> parts = new ArrayList<>();
            for (TopicPartition tp : md.assignment().topicPartitions()) {
                parts.add(tp.topic() + "-" + tp.partition());
            }
            Collections.sort(parts);
            mm.put("assignment", parts);
            members.add(mm);
        }
        members.sort((a, b) -> String.valueOf(a.get("client_id")).compareTo(String.valueOf(b.get("client_id"))));
        m.put("members", members);
        return m;
    }

    /** Members with a non-empty assignment (the partition is theirs to fetch from). */
    static int assignedMembers(Admin admin, String group) {
        return describe(admin, group)
            .map(d -> (int) d.members().stream()
                .filter(m -> !m.assignment().topicPartitions().isEmpty()).count())
            .orElse(0);
    }

    static Map<String, Object> offsetsFact(Map<TopicPartition, SharePartitionOffsetInfo> offsets) {
        Map<String, Object> out = new TreeMap<>();
        if (offsets == null) {
            return out;
        }
        for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> e : offsets.entrySet()) {
            SharePartitionOffsetInfo info = e.getValue();
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("start_offset", info == null ? null : info.startOffset());
            m.put("leader_epoch", info == null ? null : info.leaderEpoch().orElse(null));
            m.put("lag", info == null ? null : info.lag().orElse(null));
            out.put(e.getKey().topic() + "-" + e.getKey().partition(), m);
        }
        return out;
    }

    static Map<TopicPartition, SharePartitionOffsetInfo> listOffsets(Admin admin, String group) throws Exception {
        return admin.listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
            .partitionsToOffsetInfo(group).get();
    }

    // -- shared -----------------------------------------------------------------------

    static final int SHARED_RECORDS = 300;
    static final int SHARED_BEFORE = 100;  // produced before the consumers join
    static final int SHARED_CONSUMERS = 3;

    static final class Member implements Runnable {
        final String name;
        final KafkaShareConsumer<String, String> consumer;
        final Map<String, Integer> seen;  // value -> deliveries, shared by all members
        final AtomicInteger records = new AtomicInteger();
        final AtomicInteger polls = new AtomicInteger();
        final List<Integer> redelivered = Collections.synchronizedList(new ArrayList<>());
        volatile boolean stop;
        volatile Throwable failure;
        final Thread thread;

        Member(String name, String group, String topic, Map<String, Integer> seen) {
            this.name = name;
            this.seen = seen;
            this.consumer = consumer(group, "implicit", name);
            this.consumer.subscribe(List.of(topic));
            this.thread = new Thread(this, name);
            this.thread.start();
        }

        public void run() {
            try {
                while (!stop) {
                    var batch = consumer.poll(Duration.ofMillis(200));
                    polls.incrementAndGet();
                    for (ConsumerRecord<String, String> r : batch) {
                        records.incrementAndGet();
                        seen.merge(r.value(), 1, Integer::sum);
                        if (deliveryCount(r) != 1) {
                            redelivered.add(deliveryCount(r));
                        }
                        Thread.sleep(2);  // some work, so one member cannot take everything
                    }
                }
                consumer.poll(Duration.ofMillis(100));  // acknowledges the last batch
            } catch (WakeupException e) {
                // closing
            } catch (Throwable e) {
                failure = e;
                e.printStackTrace();
            }
        }

        void close() throws InterruptedException {
            stop = true;
            thread.join(20_000);
            consumer.close(Duration.ofSeconds(20));
        }
    }

    static Object shared() throws Exception {
        String topic = topic("shared");
        String group = group("shared");
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("topic", topic);
        out.put("group", group);
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        List<Member> members = new ArrayList<>();
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            groupConfig(admin, group, Map.of("share.auto.offset.reset", "earliest"));
            produce(topic, "v", 0, SHARED_BEFORE);
            long began = System.currentTimeMillis();
            for (int i = 0; i < SHARED_CONSUMERS; i++) {
                members.add(new Member("shared-" + i, group, topic, seen));
            }
            boolean joined = waitFor(30_000, () -> assignedMembers(admin, group) == SHARED_CONSUMERS);
            out.put("all_assigned", joined);
            out.put("assigned_after_ms", System.currentTimeMillis() - began);
            describe(admin, group).ifPresent(d -> out.put("describe", describeFact(d)));
            produce(topic, "v", SHARED_BEFORE, SHARED_RECORDS);
            boolean all = waitFor(60_000, () -> seen.size() >= SHARED_RECORDS);
            out.put("all_seen", all);
            out.put("all_seen_after_ms", System.currentTimeMillis() - began);
            Thread.sleep(2_000);  // anything delivered twice would show now
        } finally {
            for (Member m : members) {
                m.close();
            }
        }
        Map<String, Object> perConsumer = new LinkedHashMap<>();
        List<String> failures = new ArrayList<>();
        List<Integer> redelivered = new ArrayList<>();
        int total = 0;
        for (Member m : members) {
            perConsumer.put(m.name, m.records.get());
            total += m.records.get();
            redelivered.addAll(m.redelivered);
            if (m.failure != null) {
                failures.add(m.failure.toString());
            }
        }
        int duplicates = 0;
        for (int n : seen.values()) {
            duplicates += n - 1;
        }
        Set<String> expected = new HashSet<>();
        for (int i = 0; i < SHARED_RECORDS; i++) {
            expected.add("v-" + i);
        }
        Set<String> missing = new HashSet<>(expected);
        missing.removeAll(seen.keySet());
        Set<String> unexpected = new HashSet<>(seen.keySet());
        unexpected.removeAll(expected);
        out.put("per_consumer", perConsumer);
        out.put("total", total);
        out.put("distinct", seen.size());
        out.put("duplicates", duplicates);
        out.put("missing", missing.size());
        out.put("unexpected", unexpected.size());
        out.put("redelivered_counts", redelivered);
        out.put("failures", failures);
        return out;
    }

    // -- explicit ---------------------------------------------------------------------

    static final int EXPLICIT_RECORDS = 10;

    static Object explicit() throws Exception {
        String topic = topic("explicit");
        String group = group("explicit");
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("topic", topic);
        List<Map<String, Object>> deliveries = new ArrayList<>();
        List<Object> commits = new ArrayList<>();
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            groupConfig(admin, group, Map.of("share.auto.offset.reset", "earliest"));
            produce(topic, "e", 0, EXPLICIT_RECORDS);
        }
        Set<Long> done = new HashSet<>();  // accepted or rejected
        Long released = null;
        Long rejected = null;
        long began = System.currentTimeMillis();
        long deadline = began + 45_000;
        long quietUntil = Long.MAX_VALUE;  // after everything is done: poll 3 s more
        try (KafkaShareConsumer<String, String> consumer = consumer(group, "explicit", "explicit")) {
            consumer.subscribe(List.of(topic));
            while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                var batch = consumer.poll(Duration.ofMillis(300));
                if (batch.isEmpty()) {
                    continue;
                }
                for (ConsumerRecord<String, String> r : batch) {
                    Map<String, Object> fact = recordFact(r, began);
                    AcknowledgeType type;
                    if (released == null) {
                        released = r.offset();
                        type = AcknowledgeType.RELEASE;
                    } else if (rejected == null) {
                        rejected = r.offset();
                        type = AcknowledgeType.REJECT;
                    } else {
                        type = AcknowledgeType.ACCEPT;
                    }
                    if (type != AcknowledgeType.RELEASE) {
                        done.add(r.offset());
                    }
                    consumer.acknowledge(r, type);
                    fact.put("ack", type.name());
                    deliveries.add(fact);
                }
                commits.add(commitFact(consumer.commitSync(Duration.ofSeconds(20))));
                if (done.size() == EXPLICIT_RECORDS && quietUntil == Long.MAX_VALUE) {
                    quietUntil = System.currentTimeMillis() + 3_000;
                }
            }
        }
        out.put("released_offset", released);
        out.put("rejected_offset", rejected);
        out.put("deliveries", deliveries);
        out.put("commits", commits);
        out.put("finished", done.size() == EXPLICIT_RECORDS);
        return out;
    }

    // -- delivery_limit ---------------------------------------------------------------

    static Object deliveryLimit() throws Exception {
        String topic = topic("limit");
        String group = group("limit");
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("topic", topic);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            groupConfig(admin, group, Map.of("share.auto.offset.reset", "earliest",
                                             "share.delivery.count.limit", "2"));
            produce(topic, "d", 0, 1);
        }
        List<Map<String, Object>> deliveries = new ArrayList<>();
        List<Object> commits = new ArrayList<>();
        long began = System.currentTimeMillis();
        long deadline = began + 40_000;
        long lastDelivery = -1;
        try (KafkaShareConsumer<String, String> consumer = consumer(group, "explicit", "limit")) {
            consumer.subscribe(List.of(topic));
            // Until 6 s after the latest delivery (or the deadline).
            while (System.currentTimeMillis() < deadline
                    && (lastDelivery < 0 || System.currentTimeMillis() < lastDelivery + 6_000)) {
                var batch = consumer.poll(Duration.ofMillis(300));
                if (batch.isEmpty()) {
                    continue;
                }
                for (ConsumerRecord<String, String> r : batch) {
                    Map<String, Object> fact = recordFact(r, began);
                    consumer.acknowledge(r, AcknowledgeType.RELEASE);
                    deliveries.add(fact);
                }
                commits.add(commitFact(consumer.commitSync(Duration.ofSeconds(20))));
                lastDelivery = System.currentTimeMillis();
            }
        }
        out.put("deliveries", deliveries);
        out.put("delivery_counts", deliveries.stream().map(d -> d.get("delivery_count")).toList());
        out.put("commits", commits);
        out.put("quiet_ms_after_last", lastDelivery < 0 ? null : System.currentTimeMillis() - lastDelivery);
        return out;
    }

    // -- latest -----------------------------------------------------------------------

    static Object latest() throws Exception {
        String topic = topic("latest");
        String latestGroup = group("latest");
        String earliestGroup = group("earliest");
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("topic", topic);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            groupConfig(admin, earliestGroup, Map.of("share.auto.offset.reset", "earliest"));
            groupConfig(admin, latestGroup, Map.of());  // the default: latest
            produce(topic, "before", 0, 5);
            List<String> latestValues = new ArrayList<>();
            long began = System.currentTimeMillis();
            try (KafkaShareConsumer<String, String> consumer = consumer(latestGroup, "implicit", "latest")) {
                consumer.subscribe(List.of(topic));
                // Poll until the group's share partition is initialized: its start offset
                // listed, or (what Kafka 4.4 shows: no start offset until something is
                // acknowledged) the member assigned and two polls (ShareFetch) done after
                // that; at most 20 s. Only then are "after" records surely after it.
                long warmDeadline = began + 20_000;
                Object startOffset = null;
                List<String> observed = new ArrayList<>();
                int pollsAssigned = 0;
                while (System.currentTimeMillis() < warmDeadline && pollsAssigned < 3) {
                    boolean assigned = assignedMembers(admin, latestGroup) == 1;
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                        latestValues.add(r.value());
                    }
                    if (assigned) {
                        pollsAssigned++;
                    }
                    try {
                        var offsets = listOffsets(admin, latestGroup);
                        String fact = String.valueOf(offsetsFact(offsets));
                        if (!observed.contains(fact)) {
                            observed.add(fact);
                        }
                        SharePartitionOffsetInfo info = offsets.get(new TopicPartition(topic, 0));
                        if (info != null && info.startOffset() >= 0) {
                            startOffset = info.startOffset();
                            break;
                        }
                    } catch (Exception e) {
                        String fact = error(e).toString();
                        if (!observed.contains(fact)) {
                            observed.add(fact);
                        }
                    }
                }
                out.put("offsets_observed", observed);
                out.put("initialized_after_ms", System.currentTimeMillis() - began);
                out.put("start_offset_before_after_records", startOffset);
                produce(topic, "after", 5, 10);
                long deadline = System.currentTimeMillis() + 30_000;
                while (System.currentTimeMillis() < deadline
                        && latestValues.stream().filter(v -> v.startsWith("after")).count() < 5) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(300))) {
                        latestValues.add(r.value());
                    }
                }
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(1_000))) {
                    latestValues.add(r.value());
                }
            }
            out.put("latest_values", latestValues);
        }
        List<String> earliestValues = new ArrayList<>();
        try (KafkaShareConsumer<String, String> consumer = consumer(earliestGroup, "implicit", "earliest")) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (System.currentTimeMillis() < deadline && earliestValues.size() < 10) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(300))) {
                    earliestValues.add(r.value());
                }
            }
        }
        out.put("earliest_values", earliestValues);
        return out;
    }

    // -- admin ------------------------------------------------------------------------

    static final int ADMIN_RECORDS = 20;

    static List<Map<String, Object>> listings(Collection<GroupListing> all, String group) {
        List<Map<String, Object>> out = new ArrayList<>();
        for (GroupListing g : all) {
            if (!g.groupId().equals(group)) {
                continue;
            }
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("group", g.groupId());
            m.put("type", g.type().map(String::valueOf).orElse(null));
            m.put("protocol", g.protocol());
            m.put("state", g.groupState().map(String::valueOf).orElse(null));
            out.add(m);
        }
        return out;
    }

    /** Consumes until ``expected`` records (or 30 s); their offsets and delivery counts. */
    static List<List<Long>> consumeAll(String group, String topic, String clientId, int expected) {
        List<List<Long>> out = new ArrayList<>();
        try (KafkaShareConsumer<String, String> consumer = consumer(group, "implicit", clientId)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (System.currentTimeMillis() < deadline && out.size() < expected) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(300))) {
                    out.add(List.of(r.offset(), (long) deliveryCount(r)));
                }
            }
            consumer.poll(Duration.ofMillis(200));  // acknowledges the last batch
        }
        return out;
    }

    static Object adminCheck() throws Exception {
        String topic = topic("admin");
        String group = group("admin");
        TopicPartition tp = new TopicPartition(topic, 0);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("topic", topic);
        out.put("group", group);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            groupConfig(admin, group, Map.of("share.auto.offset.reset", "earliest"));
            produce(topic, "a", 0, ADMIN_RECORDS);
            // -- an active member, every record consumed and acknowledged
            List<Long> consumed = new ArrayList<>();
            try (KafkaShareConsumer<String, String> consumer = consumer(group, "implicit", "admin-1")) {
                consumer.subscribe(List.of(topic));
                long deadline = System.currentTimeMillis() + 30_000;
                while (System.currentTimeMillis() < deadline && consumed.size() < ADMIN_RECORDS) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(300))) {
                        consumed.add(r.offset());
                    }
                }
                out.put("consumed", consumed);
                out.put("commit", commitFact(consumer.commitSync(Duration.ofSeconds(20))));
                waitFor(20_000, () -> assignedMembers(admin, group) == 1);
                out.put("list_share_groups", attempt(() ->
                    listings(admin.listGroups(ListGroupsOptions.forShareGroups()).all().get(), group)));
                out.put("list_all_groups", attempt(() ->
                    listings(admin.listGroups().all().get(), group)));
                out.put("list_consumer_groups", attempt(() ->
                    listings(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get(), group)));
                out.put("describe_active", attempt(() ->
                    describeFact(admin.describeShareGroups(List.of(group)).all().get().get(group))));
                out.put("offsets_active", attempt(() -> offsetsFact(listOffsets(admin, group))));
                out.put("alter_active", attempt(() -> {
                    admin.alterShareGroupOffsets(group, Map.of(tp, 0L)).all().get();
                    return "done";
                }));
                out.put("delete_offsets_active", attempt(() -> {
                    admin.deleteShareGroupOffsets(group, Set.of(topic)).all().get();
                    return "done";
                }));
                out.put("delete_group_active", attempt(() -> {
                    admin.deleteShareGroups(List.of(group)).all().get();
                    return "done";
                }));
            }
            // -- the member has left
            waitFor(20_000, () -> describe(admin, group).map(d -> d.members().isEmpty()).orElse(false));
            out.put("describe_empty", attempt(() ->
                describeFact(admin.describeShareGroups(List.of(group)).all().get().get(group))));
            out.put("offsets_empty", attempt(() -> offsetsFact(listOffsets(admin, group))));
            out.put("alter_to_zero", attempt(() -> {
                admin.alterShareGroupOffsets(group, Map.of(tp, 0L)).all().get();
                return "done";
            }));
            out.put("offsets_after_alter", attempt(() -> offsetsFact(listOffsets(admin, group))));
            out.put("reread", consumeAll(group, topic, "admin-2", ADMIN_RECORDS));
            waitFor(20_000, () -> describe(admin, group).map(d -> d.members().isEmpty()).orElse(false));
            out.put("offsets_after_reread", attempt(() -> offsetsFact(listOffsets(admin, group))));
            out.put("delete_offsets", attempt(() -> {
                admin.deleteShareGroupOffsets(group, Set.of(topic)).all().get();
                return "done";
            }));
            out.put("offsets_after_delete", attempt(() -> offsetsFact(listOffsets(admin, group))));
            out.put("delete_unknown_topic_offsets", attempt(() -> {
                admin.deleteShareGroupOffsets(group, Set.of("st-no-such-topic-" + run)).all().get();
                return "done";
            }));
            out.put("delete_group", attempt(() -> {
                admin.deleteShareGroups(List.of(group)).all().get();
                return "done";
            }));
            out.put("list_after_delete", attempt(() ->
                listings(admin.listGroups(ListGroupsOptions.forShareGroups()).all().get(), group)));
            out.put("describe_after_delete", attempt(() ->
                describeFact(admin.describeShareGroups(List.of(group)).all().get().get(group))));
            out.put("delete_unknown_group", attempt(() -> {
                admin.deleteShareGroups(List.of("sg-no-such-group-" + run)).all().get();
                return "done";
            }));
        }
        return out;
    }

    // -- hold and drain (the kill test) ------------------------------------------------

    static Object hold() throws Exception {
        String topic = topic("hold");
        String group = group("hold");
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            groupConfig(admin, group, Map.of("share.auto.offset.reset", "earliest"));
            produce(topic, "h", 0, records);
        }
        KafkaShareConsumer<String, String> consumer = consumer(group, "implicit", "holder");
        consumer.subscribe(List.of(topic));
        List<Long> held = new ArrayList<>();
        List<Integer> counts = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 60_000;
        while (held.isEmpty() && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                held.add(r.offset());
                counts.add(deliveryCount(r));
            }
        }
        System.out.println("HELD " + JSON.writeValueAsString(held));
        System.out.flush();
        System.err.println("holder: acquisition lock " + consumer.acquisitionLockTimeoutMs()
            + " ms, delivery counts " + counts);
        Thread.sleep(holdSeconds * 1000L);  // the test kills this JVM here
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("held", held);
        out.put("woke_up", true);
        consumer.close(Duration.ofSeconds(5));
        return out;
    }

    static Object drain() throws Exception {
        String topic = topic("hold");
        String group = group("hold");
        Map<String, Object> out = new LinkedHashMap<>();
        Map<Long, List<Integer>> counts = new TreeMap<>();  // offset -> delivery counts seen
        Map<Long, Long> firstSeenMs = new TreeMap<>();
        Set<String> values = new HashSet<>();
        long began = System.currentTimeMillis();
        long deadline = began + 90_000;
        Optional<Integer> lock;
        try (KafkaShareConsumer<String, String> consumer = consumer(group, "implicit", "drainer")) {
            consumer.subscribe(List.of(topic));
            while (System.currentTimeMillis() < deadline && values.size() < records) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(300))) {
                    values.add(r.value());
                    counts.computeIfAbsent(r.offset(), k -> new ArrayList<>()).add(deliveryCount(r));
                    firstSeenMs.putIfAbsent(r.offset(), System.currentTimeMillis() - began);
                }
            }
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(1_000))) {
                values.add(r.value());
                counts.computeIfAbsent(r.offset(), k -> new ArrayList<>()).add(deliveryCount(r));
            }
            lock = consumer.acquisitionLockTimeoutMs();
        }
        Map<String, Object> countsOut = new LinkedHashMap<>();
        counts.forEach((k, v) -> countsOut.put(String.valueOf(k), v));
        Map<String, Object> seenOut = new LinkedHashMap<>();
        firstSeenMs.forEach((k, v) -> seenOut.put(String.valueOf(k), v));
        out.put("distinct", values.size());
        out.put("delivery_counts", countsOut);
        out.put("first_seen_ms", seenOut);
        out.put("elapsed_ms", System.currentTimeMillis() - began);
        out.put("acquisition_lock_timeout_ms", lock.orElse(null));
        return out;
    }
}
