// Command franzetl is bench/etl_bench.py's franz-go client: the two halves of a
// consume-transform-produce load (issue 31's "group ETL").
//
// -mode produce: -records records of -value-bytes bytes (lowercase letters) to -topic;
// record i has the key "i" (decimal), so the default partitioner (franz's: the key's
// murmur2 hash, as Kafka's) spreads them over every partition. Settings are franz-go's
// defaults (acks=all, idempotent writes, linger 10 ms); the records are produced
// asynchronously, then Flush.
//
// -mode stage: a member of consumer group -group reading -in from the start; for each
// record it produces the record's key with its value uppercased to -out (the same client,
// the same defaults), until it has seen -records distinct keys (a key seen again, as
// after a rebalance that rereads uncommitted records, is counted as a duplicate and
// produced again, as a real stage would). Writes (-write): "poll" (default): a poll's
// records are produced together (asynchronously), then Flush; "record": each record is
// produced with ProduceSync, acknowledged before the next is produced. Commits (-commit):
// "marks" (default): records are marked once their output is acknowledged (after the
// poll's Flush, or after each ProduceSync) and franz's autocommit (every 5 s) commits
// the marks; "sync": DisableAutoCommit, and a synchronous commit of everything polled
// after each poll's records are written; "auto": franz's plain autocommit of what was
// polled, every 5 s, whatever has been produced. At the end: a last Flush, a last
// commit, leave the group.
//
// Output on stdout, one JSON object a line: {"event":"assigned",...} when the group
// assigns partitions (stage), {"event":"progress",...} every -progress, and a last
// {"event":"done",...} with counts, errors and times (unix ns: the bench compares the
// processes' clocks, all on one machine).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	outMu sync.Mutex
	enc   = json.NewEncoder(os.Stdout)
)

func emit(m map[string]any) {
	outMu.Lock()
	defer outMu.Unlock()
	if err := enc.Encode(m); err != nil {
		os.Exit(2)
	}
}

func fail(err error) {
	emit(map[string]any{"event": "error", "error": err.Error()})
	os.Exit(1)
}

// errorList keeps the first few errors and a count of all.
type errorList struct {
	mu    sync.Mutex
	n     int64
	first []string
}

func (e *errorList) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.first) < 10 {
		e.first = append(e.first, err.Error())
	}
}

func (e *errorList) snapshot() (int64, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n, append([]string(nil), e.first...)
}

func main() {
	mode := flag.String("mode", "", "produce or stage")
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "seed brokers, comma-separated")
	topic := flag.String("topic", "", "produce: the topic")
	in := flag.String("in", "", "stage: the topic to read")
	out := flag.String("out", "", "stage: the topic to write")
	group := flag.String("group", "", "stage: the consumer group")
	records := flag.Int("records", 100000, "records to produce / distinct records to see")
	valueBytes := flag.Int("value-bytes", 100, "produce: record value size")
	commit := flag.String("commit", "marks", "stage: marks, sync or auto")
	write := flag.String("write", "poll", "stage: poll (a poll's records produced together, "+
		"then Flush) or record (each record produced and acknowledged before the next)")
	progress := flag.Duration("progress", time.Second, "how often to print progress")
	debug := flag.Bool("debug", false, "the client's debug log on stderr")
	flag.Parse()

	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(*bootstrap, ",")...)}
	if *debug {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil)))
	}
	switch *mode {
	case "produce":
		if *topic == "" {
			fail(fmt.Errorf("produce needs -topic"))
		}
		produce(append(opts, kgo.DefaultProduceTopic(*topic)), *records, *valueBytes, *progress)
	case "stage":
		if *in == "" || *out == "" || *group == "" {
			fail(fmt.Errorf("stage needs -in, -out and -group"))
		}
		if *commit != "marks" && *commit != "sync" && *commit != "auto" {
			fail(fmt.Errorf("-commit: marks, sync or auto, not %q", *commit))
		}
		if *write != "poll" && *write != "record" {
			fail(fmt.Errorf("-write: poll or record, not %q", *write))
		}
		stage(opts, *in, *out, *group, *records, *commit, *write == "record", *progress)
	default:
		fail(fmt.Errorf("-mode: produce or stage, not %q", *mode))
	}
}

func produce(opts []kgo.Opt, n, valueBytes int, every time.Duration) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fail(err)
	}
	defer cl.Close()
	value := make([]byte, valueBytes)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	var acked atomic.Int64
	var sent atomic.Int64
	var errs errorList
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				emit(map[string]any{"event": "progress", "t_ns": now.UnixNano(),
					"sent": sent.Load(), "acked": acked.Load()})
			}
		}
	}()
	ctx := context.Background()
	start := time.Now()
	for i := range n {
		r := &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: value}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				errs.add(err)
				return
			}
			acked.Add(1)
		})
		sent.Add(1)
	}
	produced := time.Now()
	if err := cl.Flush(ctx); err != nil {
		errs.add(fmt.Errorf("flush: %w", err))
	}
	end := time.Now()
	close(stop)
	nerr, first := errs.snapshot()
	emit(map[string]any{"event": "done", "mode": "produce", "records": n,
		"acked": acked.Load(), "failed": nerr, "errors": first,
		"start_ns": start.UnixNano(), "produced_ns": produced.UnixNano(),
		"end_ns": end.UnixNano(), "seconds": end.Sub(start).Seconds()})
}

func stage(opts []kgo.Opt, in, out, group string, n int, commit string, perRecord bool,
	every time.Duration) {
	var assignedOnce sync.Once
	opts = append(opts,
		kgo.DefaultProduceTopic(out),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			count := 0
			for _, ps := range a {
				count += len(ps)
			}
			first := false
			assignedOnce.Do(func() { first = true })
			emit(map[string]any{"event": "assigned", "t_ns": time.Now().UnixNano(),
				"partitions": count, "first": first})
		}),
		// OnPartitionsRevoked: franz's default (with autocommit, a blocking commit of
		// what may be committed: the marks, or what was polled before the last poll).
	)
	switch commit {
	case "marks":
		opts = append(opts, kgo.AutoCommitMarks())
	case "sync":
		opts = append(opts, kgo.DisableAutoCommit())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fail(err)
	}
	defer cl.Close()

	seen := make([]bool, n)
	var consumed, distinct, dups, acked, polls, commits atomic.Int64
	var produceErrs, fetchErrs, commitErrs errorList
	var firstNs atomic.Int64
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				emit(map[string]any{"event": "progress", "t_ns": now.UnixNano(),
					"consumed": consumed.Load(), "distinct": distinct.Load(),
					"acked": acked.Load(), "polls": polls.Load()})
			}
		}
	}()
	ctx := context.Background()
	var badKeys int64
	for distinct.Load() < int64(n) {
		fs := cl.PollFetches(ctx)
		if fs.IsClientClosed() {
			break
		}
		fs.EachError(func(t string, p int32, err error) {
			fetchErrs.add(fmt.Errorf("%s[%d]: %w", t, p, err))
		})
		batch := fs.Records()
		if len(batch) == 0 {
			continue
		}
		polls.Add(1)
		if firstNs.Load() == 0 {
			firstNs.Store(time.Now().UnixNano())
		}
		for _, r := range batch {
			consumed.Add(1)
			id, err := strconv.Atoi(string(r.Key))
			switch {
			case err != nil || id < 0 || id >= n:
				badKeys++
			case seen[id]:
				dups.Add(1)
			default:
				seen[id] = true
				distinct.Add(1)
			}
			rec := &kgo.Record{Key: r.Key, Value: bytes.ToUpper(r.Value)}
			if perRecord {
				if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
					produceErrs.add(err)
				} else {
					acked.Add(1)
				}
				if commit == "marks" {
					cl.MarkCommitRecords(r)
				}
				continue
			}
			cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
				if err != nil {
					produceErrs.add(err)
					return
				}
				acked.Add(1)
			})
		}
		if err := cl.Flush(ctx); err != nil {
			produceErrs.add(fmt.Errorf("flush: %w", err))
		}
		switch commit {
		case "marks":
			if !perRecord {
				cl.MarkCommitRecords(batch...)
			}
		case "sync":
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				commitErrs.add(err)
			}
			commits.Add(1)
		}
	}
	done := time.Now() // every distinct record seen, its output acknowledged
	var err2 error
	switch commit {
	case "marks":
		err2 = cl.CommitMarkedOffsets(ctx)
	default:
		err2 = cl.CommitUncommittedOffsets(ctx)
	}
	if err2 != nil {
		commitErrs.add(fmt.Errorf("final commit: %w", err2))
	}
	committed := time.Now()
	close(stop)
	cl.LeaveGroup()
	np, pe := produceErrs.snapshot()
	nf, fe := fetchErrs.snapshot()
	nc, ce := commitErrs.snapshot()
	emit(map[string]any{"event": "done", "mode": "stage", "in": in, "out": out,
		"group": group, "commit": commit, "per_record": perRecord, "records": n,
		"consumed": consumed.Load(), "distinct": distinct.Load(), "duplicates": dups.Load(),
		"bad_keys": badKeys, "acked": acked.Load(), "polls": polls.Load(),
		"sync_commits":   commits.Load(),
		"produce_failed": np, "produce_errors": pe, "fetch_errors_n": nf, "fetch_errors": fe,
		"commit_failed": nc, "commit_errors": ce,
		"first_record_ns": firstNs.Load(), "done_ns": done.UnixNano(),
		"committed_ns": committed.UnixNano()})
}
