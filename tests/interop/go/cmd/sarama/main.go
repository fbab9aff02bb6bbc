// Command sarama runs IBM/sarama scenarios against a broker and prints one JSON result
// line for tests/interop/test_go_clients.py:
//
//	sarama -bootstrap HOST:PORT -topic NAME produce  # idempotent SyncProducer per codec; PartitionConsumer reads back
//	sarama -bootstrap HOST:PORT -topic NAME group    # ConsumerGroup: a alone, a and b (range), a alone again
//
// The program reports what the client saw; the Python test decides whether it is right.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"odradek/interop/internal/report"
)

const baseTimestamp = 1_700_000_000_000

var (
	bootstrap = flag.String("bootstrap", "127.0.0.1:9092", "broker address")
	topic     = flag.String("topic", "sarama", "topic name")
	wait      = flag.Duration("wait", 60*time.Second, "longest wait for any one step")
)

func main() {
	flag.Parse()
	if os.Getenv("SARAMA_DEBUG") != "" {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	}
	var result map[string]any
	switch flag.Arg(0) {
	case "produce":
		result = produce()
	case "group":
		result = group()
	default:
		report.Fail("usage", fmt.Errorf("unknown scenario %q", flag.Arg(0)))
	}
	result["client"] = "sarama"
	result["scenario"] = flag.Arg(0)
	report.Print(result)
}

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V4_0_0_0
	c.ClientID = "odradek-interop-sarama"
	c.Consumer.MaxWaitTime = 500 * time.Millisecond
	c.Consumer.Return.Errors = true
	secureConfig(c) // -tls-ca, -sasl-* (secure.go, internal/secure)
	return c
}

func createTopic(name string, partitions int32) {
	admin, err := sarama.NewClusterAdmin([]string{*bootstrap}, config())
	report.Check("cluster admin", err)
	defer admin.Close()
	report.Check("create topic "+name, admin.CreateTopic(name,
		&sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false))
}

func producer(codec sarama.CompressionCodec) sarama.SyncProducer {
	c := config()
	c.Producer.Idempotent = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Net.MaxOpenRequests = 1 // what sarama requires of an idempotent producer
	c.Producer.Partitioner = sarama.NewManualPartitioner
	c.Producer.Return.Successes = true
	c.Producer.Compression = codec
	c.Producer.Flush.Frequency = 20 * time.Millisecond
	p, err := sarama.NewSyncProducer([]string{*bootstrap}, c)
	report.Check("new producer", err)
	return p
}

// send writes count records to each partition, values report.Value(phase, p, i).
func send(p sarama.SyncProducer, name string, partitions int32, phase string, count int) []int64 {
	var msgs []*sarama.ProducerMessage
	for part := int32(0); part < partitions; part++ {
		for i := 0; i < count; i++ {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: name, Partition: part,
				Key:   sarama.StringEncoder(fmt.Sprintf("k%d-%d", part, i)),
				Value: sarama.StringEncoder(report.Value(phase, part, i)),
				Headers: []sarama.RecordHeader{{Key: []byte("phase"), Value: []byte(phase)},
					{Key: []byte("index"), Value: []byte(fmt.Sprint(i))}},
				Timestamp: time.UnixMilli(baseTimestamp + int64(i)*10)})
		}
	}
	report.Check("send "+phase, p.SendMessages(msgs))
	offsets := make([]int64, len(msgs))
	for i, m := range msgs {
		offsets[i] = m.Offset
	}
	return offsets
}

func toRecord(m *sarama.ConsumerMessage) report.Record {
	r := report.Record{Partition: m.Partition, Offset: m.Offset, Key: string(m.Key),
		Value: string(m.Value), Timestamp: m.Timestamp.UnixMilli()}
	if len(m.Headers) > 0 {
		r.Headers = map[string]string{}
		for _, h := range m.Headers {
			r.Headers[string(h.Key)] = string(h.Value)
		}
	}
	return r
}

var codecs = []struct {
	name  string
	codec sarama.CompressionCodec
}{
	{"none", sarama.CompressionNone}, {"gzip", sarama.CompressionGZIP},
	{"snappy", sarama.CompressionSnappy}, {"lz4", sarama.CompressionLZ4},
	{"zstd", sarama.CompressionZSTD},
}

// produce: an idempotent SyncProducer per codec writes 20 records to each of 3
// partitions; a PartitionConsumer per partition reads them back from the oldest offset.
func produce() map[string]any {
	const partitions, count = 3, 20
	createTopic(*topic, partitions)
	produced := map[string][]int64{}
	for _, c := range codecs {
		p := producer(c.codec)
		produced[c.name] = send(p, *topic, partitions, c.name, count)
		report.Check("close producer", p.Close())
	}
	consumer, err := sarama.NewConsumer([]string{*bootstrap}, config())
	report.Check("new consumer", err)
	defer consumer.Close()
	var got []report.Record
	deadline := time.After(*wait)
	for part := int32(0); part < partitions; part++ {
		pc, err := consumer.ConsumePartition(*topic, part, sarama.OffsetOldest)
		report.Check("consume partition", err)
		for n := 0; n < count*len(codecs); n++ {
			select {
			case m := <-pc.Messages():
				got = append(got, toRecord(m))
			case e := <-pc.Errors():
				report.Fail("consume", e)
			case <-deadline:
				report.Fail("consume", fmt.Errorf("partition %d: %d records within %s", part, n, *wait))
			}
		}
		report.Check("close partition consumer", pc.Close())
	}
	return map[string]any{"produced": produced, "records": got}
}

// handler records a member's claims (Setup: assigned, Cleanup: revoked) and messages;
// each message is marked, and the session committed before its partitions are given up.
type handler struct {
	name string
	log  *report.GroupLog
}

func claimed(s sarama.ConsumerGroupSession) []int32 { return s.Claims()[*topic] }

func (h handler) Setup(s sarama.ConsumerGroupSession) error {
	h.log.Event(h.name, "assigned", claimed(s))
	return nil
}

func (h handler) Cleanup(s sarama.ConsumerGroupSession) error {
	s.Commit()
	h.log.Event(h.name, "revoked", claimed(s))
	return nil
}

func (h handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-c.Messages():
			if !ok {
				return nil
			}
			h.log.Read(h.name, toRecord(m))
			s.MarkMessage(m, "")
		case <-s.Context().Done():
			return nil
		}
	}
}

func member(name, groupID string, log *report.GroupLog) (cancel func()) {
	c := config()
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	c.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	c.Consumer.Group.Session.Timeout = 10 * time.Second
	c.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	c.Consumer.Group.Rebalance.Retry.Backoff = 200 * time.Millisecond
	g, err := sarama.NewConsumerGroup([]string{*bootstrap}, groupID, c)
	report.Check("new consumer group", err)
	ctx, stop := context.WithCancel(context.Background())
	var done sync.WaitGroup
	done.Add(2)
	go func() {
		defer done.Done()
		for e := range g.Errors() {
			report.Fail(name+" group error", e)
		}
	}()
	go func() {
		defer done.Done()
		for ctx.Err() == nil {
			err := g.Consume(ctx, []string{*topic}, handler{name, log})
			if err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) && ctx.Err() == nil {
				report.Fail(name+" consume", err)
			}
		}
		report.Check(name+" close", g.Close())
	}()
	return func() { stop(); done.Wait() }
}

// group: a reads p1 alone; b joins and the range assignor splits the partitions (an
// eager rebalance: a gives up all, then gets half back); both read p2; b leaves; a reads p3.
func group() map[string]any {
	const partitions, count = 6, 10
	createTopic(*topic, partitions)
	p := producer(sarama.CompressionNone)
	defer p.Close()
	send(p, *topic, partitions, "p1", count)
	log := &report.GroupLog{}
	groupID := *topic + "-group"
	waitFor := func(what string, cond func() bool) { report.WaitFor(what, *wait, cond) }

	stopA := member("a", groupID, log)
	waitFor("a read p1", func() bool { return log.CountPhase("p1") >= partitions*count })
	stopB := member("b", groupID, log)
	waitFor("a and b share the partitions", func() bool { return log.Shared(partitions) })
	during := log.Ownership()
	send(p, *topic, partitions, "p2", count)
	waitFor("a and b read p2", func() bool { return log.CountPhase("p2") >= partitions*count })
	stopB()
	waitFor("a owns every partition again", func() bool { return len(log.Ownership()["a"]) == partitions })
	send(p, *topic, partitions, "p3", count)
	waitFor("a read p3", func() bool { return log.CountPhase("p3") >= partitions*count })
	stopA()
	result := log.Result()
	result["shared"] = during
	return result
}
