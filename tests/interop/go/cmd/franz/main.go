// Command franz runs franz-go (github.com/twmb/franz-go) scenarios against a broker and
// prints one JSON result line for tests/interop/test_go_clients.py:
//
//	franz -bootstrap HOST:PORT -topic NAME produce  # every codec, keys, headers, timestamps; read back by partition
//	franz -bootstrap HOST:PORT -topic NAME group    # two cooperative-sticky members join, share, leave
//	franz -bootstrap HOST:PORT -topic NAME txn      # a transactional producer commits and aborts
//	franz -bootstrap HOST:PORT -topic NAME eos      # GroupTransactSession: consume-transform-produce
//
// The program reports what the client saw; the Python test decides whether it is right.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"odradek/interop/internal/report"
)

const baseTimestamp = 1_700_000_000_000

var (
	bootstrap = flag.String("bootstrap", "127.0.0.1:9092", "broker address")
	topic     = flag.String("topic", "franz", "topic name (each scenario derives its topics from it)")
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
	case "txn":
		result = txn()
	case "eos":
		result = eos()
	default:
		report.Fail("usage", fmt.Errorf("unknown scenario %q", flag.Arg(0)))
	}
	result["client"] = "franz-go"
	result["scenario"] = flag.Arg(0)
	report.Print(result)
}

func client(opts ...kgo.Opt) *kgo.Client {
	opts = append([]kgo.Opt{kgo.SeedBrokers(*bootstrap), kgo.FetchMaxWait(500 * time.Millisecond)}, opts...)
	// -tls-ca, -sasl-*: TLS and SASL (secure.go); nothing without them.
	opts = append(opts, securityOpts()...)
	if os.Getenv("FRANZ_DEBUG") != "" { // the client's own log on stderr, to see why a step hangs
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil)))
	}
	cl, err := kgo.NewClient(opts...)
	report.Check("new client", err)
	return cl
}

func ctxWait() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), *wait)
}

// createTopic sends CreateTopics through franz-go's own request types.
func createTopic(cl *kgo.Client, name string, partitions int32) {
	ctx, cancel := ctxWait()
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 30_000
	resp, err := req.RequestWith(ctx, cl)
	report.Check("create topic "+name, err)
	for _, t := range resp.Topics {
		if t.ErrorCode != 0 {
			report.Fail("create topic "+name, fmt.Errorf("error code %d", t.ErrorCode))
		}
	}
}

func toRecord(r *kgo.Record) report.Record {
	out := report.Record{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key),
		Value: string(r.Value), Timestamp: r.Timestamp.UnixMilli()}
	if len(r.Headers) > 0 {
		out.Headers = map[string]string{}
		for _, h := range r.Headers {
			out.Headers[h.Key] = string(h.Value)
		}
	}
	return out
}

// produceSync sends count records to each partition (values report.Value(phase, p, i)).
func produceSync(cl *kgo.Client, name string, partitions int32, phase string, count int) []int64 {
	var recs []*kgo.Record
	for p := int32(0); p < partitions; p++ {
		for i := 0; i < count; i++ {
			recs = append(recs, &kgo.Record{Topic: name, Partition: p,
				Key:   []byte(fmt.Sprintf("k%d-%d", p, i)),
				Value: []byte(report.Value(phase, p, i)),
				Headers: []kgo.RecordHeader{{Key: "phase", Value: []byte(phase)},
					{Key: "index", Value: []byte(fmt.Sprint(i))}},
				Timestamp: time.UnixMilli(baseTimestamp + int64(i)*10)})
		}
	}
	ctx, cancel := ctxWait()
	defer cancel()
	results := cl.ProduceSync(ctx, recs...)
	report.Check("produce "+phase, results.FirstErr())
	offsets := make([]int64, 0, len(results))
	for _, r := range results {
		offsets = append(offsets, r.Record.Offset)
	}
	return offsets
}

// readUntil polls cl until done(records so far) or the wait runs out.
func readUntil(cl *kgo.Client, got *[]report.Record, done func([]report.Record) bool) {
	deadline := time.Now().Add(*wait)
	for !done(*got) && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fetches := cl.PollFetches(ctx)
		cancel()
		for _, e := range fetches.Errors() {
			if e.Err != context.DeadlineExceeded {
				report.Fail(fmt.Sprintf("fetch %s-%d", e.Topic, e.Partition), e.Err)
			}
		}
		fetches.EachRecord(func(r *kgo.Record) { *got = append(*got, toRecord(r)) })
	}
}

func atLeast(n int) func([]report.Record) bool {
	return func(rs []report.Record) bool { return len(rs) >= n }
}

func fromStart(name string, partitions int32) kgo.Opt {
	offsets := map[int32]kgo.Offset{}
	for p := int32(0); p < partitions; p++ {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	return kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{name: offsets})
}

var codecs = []struct {
	name  string
	codec kgo.CompressionCodec
}{
	{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()},
	{"snappy", kgo.SnappyCompression()}, {"lz4", kgo.Lz4Compression()},
	{"zstd", kgo.ZstdCompression()},
}

// produce: one idempotent producer per codec writes 20 records to each of 3 partitions
// (codec by codec, so each partition holds the codecs in order); a consumer assigned the
// partitions (no group) reads everything back.
func produce() map[string]any {
	const partitions, count = 3, 20
	admin := client()
	defer admin.Close()
	createTopic(admin, *topic, partitions)
	produced := map[string][]int64{}
	for _, c := range codecs {
		cl := client(kgo.ProducerBatchCompression(c.codec), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerLinger(50*time.Millisecond))
		produced[c.name] = produceSync(cl, *topic, partitions, c.name, count)
		cl.Close()
	}
	consumer := client(fromStart(*topic, partitions))
	defer consumer.Close()
	var got []report.Record
	readUntil(consumer, &got, atLeast(partitions*count*len(codecs)))
	return map[string]any{"produced": produced, "records": got}
}

// member joins the group with the cooperative-sticky balancer, commits what it polled
// after each poll and before giving partitions up, and records every callback and record.
func member(name, group string, log *report.GroupLog) (*kgo.Client, *sync.WaitGroup) {
	var cl *kgo.Client
	cl = client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(*topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.DisableAutoCommit(),
		kgo.HeartbeatInterval(500*time.Millisecond), kgo.SessionTimeout(20*time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			log.Event(name, "assigned", ps[*topic])
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, c *kgo.Client, ps map[string][]int32) {
			log.Event(name, "revoked", ps[*topic])
			report.Check(name+" commit on revoke", c.CommitUncommittedOffsets(ctx))
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			log.Event(name, "lost", ps[*topic])
		}))
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for {
			fetches := cl.PollFetches(context.Background())
			if fetches.IsClientClosed() {
				return
			}
			for _, e := range fetches.Errors() {
				report.Fail(fmt.Sprintf("%s fetch %s-%d", name, e.Topic, e.Partition), e.Err)
			}
			fetches.EachRecord(func(r *kgo.Record) { log.Read(name, toRecord(r)) })
			ctx, cancel := ctxWait()
			err := cl.CommitUncommittedOffsets(ctx)
			cancel()
			if err != nil && err != kgo.ErrClientClosed {
				report.Fail(name+" commit", err)
			}
		}
	}()
	return cl, &done
}

// group: member a reads phase p1 alone; member b joins (a gives up half its partitions,
// keeping the rest: cooperative), both read p2; b leaves and a takes its partitions back
// and reads p3.
func group() map[string]any {
	const partitions, count = 6, 10
	producer := client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer producer.Close()
	createTopic(producer, *topic, partitions)
	produceSync(producer, *topic, partitions, "p1", count)
	log := &report.GroupLog{}
	groupID := *topic + "-group"

	a, aDone := member("a", groupID, log)
	waitFor("a read p1", func() bool { return log.CountPhase("p1") >= partitions*count })
	b, bDone := member("b", groupID, log)
	waitFor("a and b share the partitions", func() bool { return log.Shared(partitions) })
	during := log.Ownership()
	produceSync(producer, *topic, partitions, "p2", count)
	waitFor("a and b read p2", func() bool { return log.CountPhase("p2") >= partitions*count })
	b.Close()
	bDone.Wait()
	waitFor("a owns every partition again", func() bool { return len(log.Ownership()["a"]) == partitions })
	produceSync(producer, *topic, partitions, "p3", count)
	waitFor("a read p3", func() bool { return log.CountPhase("p3") >= partitions*count })
	a.Close()
	aDone.Wait()
	result := log.Result()
	result["shared"] = during
	return result
}

// txn: a transactional producer commits c1 (invisible to read_committed while open),
// aborts a1, commits c2; read_committed and read_uncommitted consumers report what they saw.
func txn() map[string]any {
	const partitions, count = 2, 10
	producer := client(kgo.TransactionalID(*topic+"-txn"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionTimeout(60*time.Second))
	defer producer.Close()
	createTopic(producer, *topic, partitions)
	committed := client(fromStart(*topic, partitions), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer committed.Close()
	uncommitted := client(fromStart(*topic, partitions))
	defer uncommitted.Close()
	var rc, ru []report.Record
	ctx, cancel := ctxWait()
	defer cancel()

	step := func(phase string, end kgo.TransactionEndTry) {
		report.Check("begin "+phase, producer.BeginTransaction())
		produceSync(producer, *topic, partitions, phase, count)
		readUntil(uncommitted, &ru, atLeast(len(ru)+partitions*count))
		if phase == "c1" {
			// The records are in the log (read_uncommitted saw them); read_committed must not
			// see them while the transaction is open.
			quiet := *wait
			*wait = 3 * time.Second
			readUntil(committed, &rc, atLeast(1))
			*wait = quiet
		}
		report.Check("end "+phase, producer.EndTransaction(ctx, end))
	}
	step("c1", kgo.TryCommit)
	seenWhileOpen := len(rc)
	readUntil(committed, &rc, atLeast(partitions*count))
	seenAfterCommit := len(rc)
	step("a1", kgo.TryAbort)
	step("c2", kgo.TryCommit)
	readUntil(committed, &rc, func(rs []report.Record) bool {
		return len(rs) > 0 && strings.HasPrefix(rs[len(rs)-1].Value, "c2-") && countPrefix(rs, "c2-") >= partitions*count
	})
	return map[string]any{"seen_while_open": seenWhileOpen, "seen_after_commit": seenAfterCommit,
		"read_committed": rc, "read_uncommitted": ru}
}

func countPrefix(rs []report.Record, prefix string) int {
	n := 0
	for _, r := range rs {
		if strings.HasPrefix(r.Value, prefix) {
			n++
		}
	}
	return n
}

// eos: a GroupTransactSession reads topic-in in a group and writes each record to the
// same partition of topic-out, in one transaction with its offsets per poll. Its first
// transaction with records is aborted on purpose: the session must rewind to the
// committed offsets and produce those records again. A second session in the group
// afterwards must find nothing left to read.
func eos() map[string]any {
	const partitions, count = 3, 30
	in, out := *topic+"-in", *topic+"-out"
	producer := client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer producer.Close()
	createTopic(producer, in, partitions)
	createTopic(producer, out, partitions)
	*topic = in
	produceSync(producer, in, partitions, "in", count)
	groupID := out + "-group"

	session := func() *kgo.GroupTransactSession {
		s, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(*bootstrap),
			kgo.TransactionalID(out+"-eos"), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(in),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RequireStableFetchOffsets(),
			kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.HeartbeatInterval(500*time.Millisecond), kgo.FetchMaxWait(500*time.Millisecond),
			kgo.TransactionTimeout(60*time.Second))
		report.Check("new session", err)
		return s
	}
	type txnLog struct {
		Records   int  `json:"records"`
		Abort     bool `json:"abort"`
		Committed bool `json:"committed"`
	}
	var txns []txnLog
	s := session()
	done, aborted := map[int32]int{}, false
	deadline := time.Now().Add(*wait)
	total := func() int {
		n := 0
		for _, c := range done {
			n += c
		}
		return n
	}
	for total() < partitions*count && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fetches := s.PollFetches(ctx)
		cancel()
		for _, e := range fetches.Errors() {
			if e.Err != context.DeadlineExceeded {
				report.Fail(fmt.Sprintf("session fetch %s-%d", e.Topic, e.Partition), e.Err)
			}
		}
		if fetches.NumRecords() == 0 {
			continue
		}
		report.Check("session begin", s.Begin())
		perPartition := map[int32]int{}
		fetches.EachRecord(func(r *kgo.Record) {
			perPartition[r.Partition]++
			s.Produce(context.Background(), &kgo.Record{Topic: out, Partition: r.Partition, Key: r.Key,
				Value: []byte("out:" + string(r.Value))}, func(_ *kgo.Record, err error) {
				report.Check("session produce", err)
			})
		})
		abort := !aborted
		aborted = true
		ctx, cancel = ctxWait()
		// Flushed first, so the aborted transaction's records are in the log (and must
		// stay invisible), not just dropped from the client's buffer.
		report.Check("session flush", s.Client().Flush(ctx))
		committed, err := s.End(ctx, kgo.TransactionEndTry(!abort))
		cancel()
		report.Check("session end", err)
		txns = append(txns, txnLog{fetches.NumRecords(), abort, committed})
		if committed {
			for p, n := range perPartition {
				done[p] += n
			}
		}
	}
	s.Close()

	// A second session of the group: the committed offsets leave nothing to read.
	again := session()
	leftover := []report.Record{} // [] in the JSON, not null
	quiet := *wait
	*wait = 3 * time.Second
	readUntil(again.Client(), &leftover, atLeast(1))
	*wait = quiet
	again.Close()

	reader := client(fromStart(out, partitions), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer reader.Close()
	var outRecords []report.Record
	readUntil(reader, &outRecords, atLeast(partitions*count))
	return map[string]any{"transactions": txns, "leftover": leftover, "out": outRecords, "group": groupID}
}

func waitFor(what string, cond func() bool) { report.WaitFor(what, *wait, cond) }
