// Command kafkago runs segmentio/kafka-go scenarios against a broker and prints one JSON
// result line for tests/interop/test_go_clients.py:
//
//	kafkago -bootstrap HOST:PORT -topic NAME produce  # a Writer per codec; a partition Reader per partition reads back
//	kafkago -bootstrap HOST:PORT -topic NAME group    # group Readers: a alone, a and b, a alone again
//
// The program reports what the client saw; the Python test decides whether it is right.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"

	"odradek/interop/internal/report"
)

const baseTimestamp = 1_700_000_000_000

var (
	bootstrap = flag.String("bootstrap", "127.0.0.1:9092", "broker address")
	topic     = flag.String("topic", "kafkago", "topic name")
	wait      = flag.Duration("wait", 60*time.Second, "longest wait for any one step")
)

func main() {
	flag.Parse()
	var result map[string]any
	switch flag.Arg(0) {
	case "produce":
		result = produce()
	case "group":
		result = group()
	default:
		report.Fail("usage", fmt.Errorf("unknown scenario %q", flag.Arg(0)))
	}
	result["client"] = "kafka-go"
	result["scenario"] = flag.Arg(0)
	report.Print(result)
}

func ctxWait() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), *wait)
}

func debugLogger(prefix string) kafka.Logger {
	if os.Getenv("KAFKAGO_DEBUG") == "" {
		return nil
	}
	return kafka.LoggerFunc(func(msg string, args ...any) {
		report.Logf(prefix+msg, args...)
	})
}

func createTopic(name string, partitions int) {
	cl := &kafka.Client{Addr: kafka.TCP(*bootstrap), Timeout: *wait}
	ctx, cancel := ctxWait()
	defer cancel()
	resp, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{
		{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}}})
	report.Check("create topic "+name, err)
	for t, e := range resp.Errors {
		report.Check("create topic "+t, e)
	}
}

// byKey sends "k<partition>-<i>" to <partition>: the Writer's balancer picks partitions.
var byKey = kafka.BalancerFunc(func(m kafka.Message, partitions ...int) int {
	p, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(string(m.Key), "k"), "-", 2)[0])
	report.Check("partition from key", err)
	return p
})

func writer(codec compress.Compression) *kafka.Writer {
	return &kafka.Writer{Addr: kafka.TCP(*bootstrap), Topic: *topic, Balancer: byKey,
		RequiredAcks: kafka.RequireAll, Compression: codec, BatchSize: 1000,
		BatchTimeout: 20 * time.Millisecond, Logger: debugLogger("writer: ")}
}

// write sends count records to each partition, values report.Value(phase, p, i).
func write(w *kafka.Writer, partitions int, phase string, count int) {
	var msgs []kafka.Message
	for p := 0; p < partitions; p++ {
		for i := 0; i < count; i++ {
			msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprintf("k%d-%d", p, i)),
				Value: []byte(report.Value(phase, int32(p), i)),
				Headers: []kafka.Header{{Key: "phase", Value: []byte(phase)},
					{Key: "index", Value: []byte(fmt.Sprint(i))}},
				Time: time.UnixMilli(baseTimestamp + int64(i)*10)})
		}
	}
	ctx, cancel := ctxWait()
	defer cancel()
	report.Check("write "+phase, w.WriteMessages(ctx, msgs...))
}

func toRecord(m kafka.Message) report.Record {
	r := report.Record{Partition: int32(m.Partition), Offset: m.Offset, Key: string(m.Key),
		Value: string(m.Value), Timestamp: m.Time.UnixMilli()}
	if len(m.Headers) > 0 {
		r.Headers = map[string]string{}
		for _, h := range m.Headers {
			r.Headers[h.Key] = string(h.Value)
		}
	}
	return r
}

var codecs = []struct {
	name  string
	codec compress.Compression
}{
	{"none", 0}, {"gzip", kafka.Gzip}, {"snappy", kafka.Snappy}, {"lz4", kafka.Lz4},
	{"zstd", kafka.Zstd},
}

// produce: a Writer per codec writes 20 records to each of 3 partitions; a Reader per
// partition (no group) reads them back from the first offset.
func produce() map[string]any {
	const partitions, count = 3, 20
	createTopic(*topic, partitions)
	for _, c := range codecs {
		w := writer(c.codec)
		write(w, partitions, c.name, count)
		report.Check("close writer", w.Close())
	}
	var got []report.Record
	for p := 0; p < partitions; p++ {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{*bootstrap}, Topic: *topic,
			Partition: p, MaxWait: 500 * time.Millisecond, Logger: debugLogger("reader: ")})
		report.Check("set offset", r.SetOffset(kafka.FirstOffset))
		ctx, cancel := ctxWait()
		for n := 0; n < count*len(codecs); n++ {
			m, err := r.ReadMessage(ctx)
			report.Check(fmt.Sprintf("read partition %d after %d records", p, n), err)
			got = append(got, toRecord(m))
		}
		cancel()
		report.Check("close reader", r.Close())
	}
	return map[string]any{"records": got}
}

// member is a group Reader: it fetches, records and commits each message (synchronously,
// so a partition's next owner starts after what this one read).
func member(name, groupID string, log *report.GroupLog) (stop func()) {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{*bootstrap}, Topic: *topic,
		GroupID: groupID, StartOffset: kafka.FirstOffset, MaxWait: 500 * time.Millisecond,
		HeartbeatInterval: 500 * time.Millisecond, SessionTimeout: 10 * time.Second,
		RebalanceTimeout: 10 * time.Second, JoinGroupBackoff: 200 * time.Millisecond,
		Dialer: &kafka.Dialer{ClientID: "odradek-kafkago-" + name, Timeout: 10 * time.Second},
		Logger: debugLogger(name + ": ")})
	ctx, cancel := context.WithCancel(context.Background())
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for {
			m, err := r.FetchMessage(ctx)
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return
			}
			report.Check(name+" fetch", err)
			log.Read(name, toRecord(m))
			if err := r.CommitMessages(ctx, m); err != nil && ctx.Err() == nil {
				report.Fail(name+" commit", err)
			}
		}
	}()
	return func() {
		cancel()
		done.Wait()
		report.Check(name+" close", r.Close())
	}
}

// ownership asks the coordinator (DescribeGroups) which member owns which partitions,
// by client id; nil while the group is not Stable.
func ownership(groupID string) map[string][]int32 {
	cl := &kafka.Client{Addr: kafka.TCP(*bootstrap), Timeout: 10 * time.Second}
	resp, err := cl.DescribeGroups(context.Background(), &kafka.DescribeGroupsRequest{GroupIDs: []string{groupID}})
	report.Check("describe group", err)
	g := resp.Groups[0]
	report.Check("describe group", g.Error)
	if g.GroupState != "Stable" {
		return nil
	}
	out := map[string][]int32{}
	for _, m := range g.Members {
		name := strings.TrimPrefix(m.ClientID, "odradek-kafkago-")
		for _, t := range m.MemberAssignments.Topics {
			for _, p := range t.Partitions {
				out[name] = append(out[name], int32(p))
			}
		}
	}
	return out
}

// group: a reads p1 alone; b joins and the group's assignor splits the partitions; both
// read p2; b leaves; a reads p3. Who owns what comes from DescribeGroups.
func group() map[string]any {
	const partitions, count = 6, 10
	createTopic(*topic, partitions)
	w := writer(0)
	defer w.Close()
	write(w, partitions, "p1", count)
	log := &report.GroupLog{}
	groupID := *topic + "-group"
	waitFor := func(what string, cond func() bool) { report.WaitFor(what, *wait, cond) }
	var owned map[string][]int32
	owners := func(want map[string]int) func() bool {
		return func() bool {
			owned = ownership(groupID)
			if len(owned) != len(want) {
				return false
			}
			total := 0
			for name, n := range want {
				if len(owned[name]) < n {
					return false
				}
				total += len(owned[name])
			}
			return total == partitions
		}
	}

	stopA := member("a", groupID, log)
	waitFor("a owns every partition", owners(map[string]int{"a": partitions}))
	alone := owned
	waitFor("a read p1", func() bool { return log.CountPhase("p1") >= partitions*count })
	stopB := member("b", groupID, log)
	waitFor("a and b share the partitions", owners(map[string]int{"a": 1, "b": 1}))
	shared := owned
	write(w, partitions, "p2", count)
	waitFor("a and b read p2", func() bool { return log.CountPhase("p2") >= partitions*count })
	stopB()
	waitFor("a owns every partition again", owners(map[string]int{"a": partitions}))
	again := owned
	write(w, partitions, "p3", count)
	waitFor("a read p3", func() bool { return log.CountPhase("p3") >= partitions*count })
	stopA()
	result := log.Result()
	result["owners"] = []map[string][]int32{alone, shared, again}
	return result
}
