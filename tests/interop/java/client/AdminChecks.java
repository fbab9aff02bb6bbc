import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeProducersResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;

/**
 * The Java AdminClient against Odradek: topics, configs, partitions, consumer groups and
 * their offsets, delete records, cluster, log dirs, producers and transactions.
 *
 * Usage: AdminChecks BOOTSTRAP
 */
public final class AdminChecks {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        try (Admin admin = Admin.create(Common.admin(bootstrap))) {
            Common.check("cluster", () -> cluster(admin));
            Common.check("topics", () -> topics(admin));
            Common.check("configs", () -> configs(admin));
            Common.check("delete-records", () -> deleteRecords(admin, bootstrap));
            Common.check("groups", () -> groups(admin, bootstrap));
            Common.check("log-dirs", () -> logDirs(admin));
            Common.check("producers-transactions", () -> producersAndTransactions(admin, bootstrap));
        }
        Common.printResult();
    }

    static String errorName(Runnable r) {
        try {
            r.run();
            return null;
        } catch (RuntimeException e) {
            Throwable c = e.getCause() != null ? e.getCause() : e;
            return c.getClass().getSimpleName();
        }
    }

    interface Get {
        Object get() throws Exception;
    }

    static String failure(Get g) {
        try {
            g.get();
            return null;
        } catch (java.util.concurrent.ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        } catch (Exception e) {
            return e.getClass().getSimpleName();
        }
    }

    static Object cluster(Admin admin) throws Exception {
        DescribeClusterResult r = admin.describeCluster();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("cluster_id", r.clusterId().get());
        List<String> nodes = new ArrayList<>();
        for (Node n : r.nodes().get()) {
            nodes.add(n.id() + "@" + n.host() + ":" + n.port());
        }
        out.put("nodes", nodes);
        Node controller = r.controller().get();
        out.put("controller", controller == null ? null : controller.id());
        return out;
    }

    static Object topics(Admin admin) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String topic = "java-admin-topic";
        admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1)
                .configs(Map.of("retention.ms", "86400000", "cleanup.policy", "delete")))).all().get();
        out.put("create_again", failure(() -> admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get()));
        out.put("create_bad_name", failure(() -> admin.createTopics(List.of(new NewTopic("bad/name", 1, (short) 1))).all().get()));
        out.put("listed", admin.listTopics().names().get().contains(topic));
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        out.put("partitions", d.partitions().size());
        out.put("topic_id_set", d.topicId() != null && !d.topicId().toString().isEmpty());
        out.put("leaders", d.partitions().stream().map(p -> p.leader().id()).toList());
        admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get();
        out.put("partitions_after_create", admin.describeTopics(List.of(topic)).allTopicNames().get()
                .get(topic).partitions().size());
        out.put("shrink", failure(() -> admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(2))).all().get()));
        admin.deleteTopics(List.of(topic)).all().get();
        boolean gone = ConsumerChecks.waitFor(30_000, () -> {
            try {
                return !admin.listTopics().names().get().contains(topic);
            } catch (Exception e) {
                return false;
            }
        });
        out.put("gone_from_list", gone);
        out.put("describe_deleted", failure(() -> admin.describeTopics(List.of(topic)).allTopicNames().get()));
        out.put("delete_missing", failure(() -> admin.deleteTopics(List.of("java-no-such-topic")).all().get()));
        return out;
    }

    static Map<String, String> topicConfig(Admin admin, String topic) throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config c = admin.describeConfigs(List.of(res)).all().get().get(res);
        Map<String, String> m = new TreeMap<>();
        for (ConfigEntry e : c.entries()) {
            if (e.name().equals("retention.ms") || e.name().equals("cleanup.policy")
                    || e.name().equals("max.message.bytes") || e.name().equals("segment.bytes")) {
                m.put(e.name(), e.value() + " (" + e.source() + ")");
            }
        }
        return m;
    }

    static Object configs(Admin admin) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String topic = "java-admin-configs";
        admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1)
                .configs(Map.of("retention.ms", "86400000")))).all().get();
        out.put("initial", topicConfig(admin, topic));
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("max.message.bytes", "2000000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE)))).all().get();
        out.put("altered", topicConfig(admin, topic));
        out.put("invalid_value", failure(() -> admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "not-a-number"), AlterConfigOp.OpType.SET))))
                .all().get()));
        out.put("unknown_topic", failure(() -> admin.describeConfigs(List.of(
                new ConfigResource(ConfigResource.Type.TOPIC, "java-no-such-topic"))).all().get()));
        Node node = admin.describeCluster().nodes().get().iterator().next();
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(node.id()));
        Config bc = admin.describeConfigs(List.of(broker)).all().get().get(broker);
        ConfigEntry partitions = bc.get("num.partitions");
        out.put("broker_num_partitions", partitions == null ? null : partitions.value());
        out.put("broker_entries", bc.entries().size());
        return out;
    }

    static Object deleteRecords(Admin admin, String bootstrap) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String topic = "java-admin-delete-records";
        Common.createTopic(admin, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> p = new KafkaProducer<>(Common.producer(bootstrap))) {
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>(topic, 0, "k", "r" + i));
            }
            p.flush();
        }
        out.put("low_watermark", admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).lowWatermarks()
                .get(tp).get().lowWatermark());
        ListOffsetsResult lo = admin.listOffsets(Map.of(tp, OffsetSpec.earliest()));
        out.put("earliest", lo.partitionResult(tp).get().offset());
        out.put("latest", admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get().offset());
        out.put("beyond_end", failure(() -> admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(99)))
                .lowWatermarks().get(tp).get()));
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Common.consumer(bootstrap, null))) {
            out.put("first_read", Common.readAll(c, List.of(tp), 6).stream().map(r -> r.offset()).toList());
        }
        return out;
    }

    static Object groups(Admin admin, String bootstrap) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String topic = "java-admin-groups", group = "java-admin-group";
        Common.createTopic(admin, topic, 2);
        TopicPartition p0 = new TopicPartition(topic, 0), p1 = new TopicPartition(topic, 1);
        try (KafkaProducer<String, String> p = new KafkaProducer<>(Common.producer(bootstrap))) {
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>(topic, i % 2, "k", "g" + i));
            }
            p.flush();
        }
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Common.consumer(bootstrap, group))) {
            c.assign(List.of(p0, p1));
            c.commitSync(Map.of(p0, new OffsetAndMetadata(3), p1, new OffsetAndMetadata(5, "meta")));
        }
        List<String> listed = new ArrayList<>();
        for (ConsumerGroupListing l : admin.listConsumerGroups().all().get()) {
            listed.add(l.groupId() + ":" + l.groupState().map(Object::toString).orElse("?"));
        }
        out.put("listed", listed);
        List<String> allGroups = new ArrayList<>();
        for (GroupListing l : admin.listGroups().all().get()) {
            allGroups.add(l.groupId() + ":" + l.type().map(Object::toString).orElse("?"));
        }
        out.put("list_groups", allGroups);
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        out.put("describe", Map.of("state", d.groupState().toString(), "members", d.members().size(),
                "coordinator", d.coordinator().id(), "type", d.type().toString()));
        out.put("offsets", offsets(admin, group));
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> lag = admin.listOffsets(
                Map.of(p0, OffsetSpec.latest(), p1, OffsetSpec.latest())).all().get();
        out.put("end_offsets", List.of(lag.get(p0).offset(), lag.get(p1).offset()));
        admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(1))).all().get();
        out.put("offsets_after_alter", offsets(admin, group));
        admin.deleteConsumerGroupOffsets(group, Set.of(p1)).all().get();
        out.put("offsets_after_delete", offsets(admin, group));
        admin.deleteConsumerGroups(List.of(group)).all().get();
        out.put("describe_after_delete", failure(() -> admin.describeConsumerGroups(List.of(group)).all().get()));
        out.put("listed_after_delete", admin.listConsumerGroups().all().get().stream()
                .anyMatch(l -> l.groupId().equals(group)));
        out.put("delete_missing", failure(() -> admin.deleteConsumerGroups(List.of("java-no-such-group")).all().get()));
        return out;
    }

    static Map<String, Object> offsets(Admin admin, String group) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> m = admin.listConsumerGroupOffsets(
                Map.of(group, new ListConsumerGroupOffsetsSpec())).partitionsToOffsetAndMetadata(group).get();
        Map<String, Object> out = new TreeMap<>();
        m.forEach((tp, om) -> out.put(tp.toString(), om == null ? null : List.of(om.offset(), om.metadata())));
        return out;
    }

    static Object logDirs(Admin admin) throws Exception {
        Node node = admin.describeCluster().nodes().get().iterator().next();
        Map<String, LogDirDescription> dirs = admin.describeLogDirs(List.of(node.id())).allDescriptions().get()
                .get(node.id());
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("dirs", dirs.size());
        Map<String, Long> sizes = new TreeMap<>();
        for (LogDirDescription d : dirs.values()) {
            out.put("error", d.error() == null ? null : d.error().getClass().getSimpleName());
            out.put("total_bytes_present", d.totalBytes().isPresent());
            for (Map.Entry<TopicPartition, ReplicaInfo> e : d.replicaInfos().entrySet()) {
                if (e.getKey().topic().startsWith("java-admin-delete-records")) {
                    sizes.put(e.getKey().toString(), e.getValue().size());
                }
            }
        }
        out.put("sizes", sizes);
        return out;
    }

    static Object producersAndTransactions(Admin admin, String bootstrap) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String topic = "java-admin-txn";
        Common.createTopic(admin, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        Properties pp = Common.producer(bootstrap);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-admin-txn-id");
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, "k", "t0"));
            p.send(new ProducerRecord<>(topic, 0, "k", "t1"));
            p.flush();
            out.put("producers_open", producers(admin, tp));
            List<String> listed = new ArrayList<>();
            for (TransactionListing l : admin.listTransactions().all().get()) {
                listed.add(l.transactionalId() + ":" + l.state());
            }
            out.put("list_open", listed);
            TransactionDescription d = admin.describeTransactions(List.of("java-admin-txn-id")).all().get()
                    .get("java-admin-txn-id");
            out.put("describe_open", Map.of("state", d.state().toString(),
                    "partitions", d.topicPartitions().stream().map(Object::toString).sorted().toList(),
                    "timeout_ms", d.transactionTimeoutMs(),
                    "producer_id", d.producerId(),
                    "start_set", d.transactionStartTimeMs().isPresent()));
            p.commitTransaction();
        }
        out.put("producers_after", producers(admin, tp));
        TransactionDescription done = admin.describeTransactions(List.of("java-admin-txn-id")).all().get()
                .get("java-admin-txn-id");
        out.put("describe_after", Map.of("state", done.state().toString(),
                "partitions", done.topicPartitions().size()));
        out.put("describe_missing", failure(() -> admin.describeTransactions(List.of("java-no-such-txn")).all().get()));
        return out;
    }

    static List<Map<String, Object>> producers(Admin admin, TopicPartition tp) throws Exception {
        DescribeProducersResult.PartitionProducerState s = admin.describeProducers(List.of(tp)).partitionResult(tp).get();
        List<Map<String, Object>> out = new ArrayList<>();
        for (ProducerState ps : s.activeProducers()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("producer_id", ps.producerId());
            m.put("epoch", ps.producerEpoch());
            m.put("last_sequence", ps.lastSequence());
            m.put("txn_start_offset", ps.currentTransactionStartOffset().isPresent()
                    ? ps.currentTransactionStartOffset().getAsLong() : null);
            out.add(m);
        }
        return out;
    }
}
