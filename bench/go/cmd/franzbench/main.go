// Command franzbench is bench/partitions_bench.py's franz-go client: a paced producer
// that sends -rate records/s of -value-bytes bytes for -warmup + -seconds seconds,
// record i to partition i mod -partitions (a manual partitioner), and prints one JSON
// line with the latency of every measured record: from the Produce call to its promise
// (the acknowledgement), in microseconds (-1: the record failed).
//
// Producer settings are franz-go's defaults (acks=all, idempotent writes) but
// ProducerLinger(-linger). Pacing: record k is due at start + k/rate; the loop sleeps
// until the next record is due, then sends every record that is due.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "seed brokers, comma-separated")
	topic := flag.String("topic", "", "topic to produce to")
	partitions := flag.Int("partitions", 1, "the topic's partitions: record i goes to i mod this")
	rate := flag.Float64("rate", 10000, "records per second")
	seconds := flag.Float64("seconds", 10, "measured seconds")
	warmup := flag.Float64("warmup", 1, "seconds paced at the rate before measuring")
	valueBytes := flag.Int("value-bytes", 100, "record value size")
	linger := flag.Duration("linger", time.Millisecond, "ProducerLinger")
	debug := flag.Bool("debug", false, "the client's debug log on stderr")
	flag.Parse()

	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.DefaultProduceTopic(*topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(*linger),
	}
	if *debug {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fail(err)
	}
	defer cl.Close()
	value := make([]byte, *valueBytes)
	ctx := context.Background()
	// One acknowledged record per partition first: metadata loaded, connections open.
	first := make([]*kgo.Record, *partitions)
	for p := range first {
		first[p] = &kgo.Record{Value: value, Partition: int32(p)}
	}
	setup, cancel := context.WithTimeout(ctx, 60*time.Second)
	if err := cl.ProduceSync(setup, first...).FirstErr(); err != nil {
		fail(fmt.Errorf("first records: %w", err))
	}
	cancel()

	total := int(*rate * (*warmup + *seconds))
	warm := int(*rate * *warmup)
	lat := make([]int64, total-warm) // microseconds, by record index - warm
	var failed atomic.Int64
	var errMu sync.Mutex
	var errs []string
	interval := float64(time.Second) / *rate
	var firstMeasured, last time.Time
	var maxLag time.Duration
	start := time.Now()
	sent := 0
	for sent < total {
		now := time.Now()
		due := min(total, int(float64(now.Sub(start))/interval)+1)
		if due <= sent {
			time.Sleep(start.Add(time.Duration(float64(sent) * interval)).Sub(now))
			continue
		}
		if lag := now.Sub(start.Add(time.Duration(float64(sent) * interval))); sent >= warm && lag > maxLag {
			maxLag = lag
		}
		for ; sent < due; sent++ {
			i := sent
			t := time.Now()
			if i == warm {
				firstMeasured = t
			}
			last = t
			cl.Produce(ctx, &kgo.Record{Value: value, Partition: int32(i % *partitions)},
				func(_ *kgo.Record, err error) {
					if err != nil {
						if i >= warm {
							lat[i-warm] = -1 // not acknowledged: left out
						}
						failed.Add(1)
						errMu.Lock()
						if len(errs) < 10 {
							errs = append(errs, err.Error())
						}
						errMu.Unlock()
						return
					}
					if i >= warm {
						lat[i-warm] = time.Since(t).Microseconds()
					}
				})
		}
	}
	flushCtx, cancelFlush := context.WithTimeout(ctx, 60*time.Second)
	flushErr := cl.Flush(flushCtx)
	cancelFlush()
	if flushErr != nil {
		errs = append(errs, "flush: "+flushErr.Error())
	}
	window := last.Sub(firstMeasured).Seconds()
	measured := total - warm
	achieved := 0.0
	if window > 0 {
		achieved = float64(measured-1) / window
	}
	out := map[string]any{
		"client":        "franz-go",
		"records":       measured,
		"total":         total,
		"window_s":      window,
		"achieved_rate": achieved,
		"max_lag_ms":    float64(maxLag.Microseconds()) / 1000,
		"lost":          failed.Load(),
		"errors":        errs,
		"latencies_us":  lat,
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	json.NewEncoder(os.Stdout).Encode(map[string]any{"client": "franz-go", "error": err.Error()})
	os.Exit(1)
}
