package report

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// GroupEvent is one change of a member's partitions: assigned, revoked or lost.
type GroupEvent struct {
	Seq        int     `json:"seq"`
	Member     string  `json:"member"`
	Kind       string  `json:"kind"`
	Partitions []int32 `json:"partitions"`
}

// GroupRecord is a record and the member that read it.
type GroupRecord struct {
	Member string `json:"member"`
	Record
}

// GroupLog collects what the members of a group did, in order, from their goroutines.
type GroupLog struct {
	mu      sync.Mutex
	Events  []GroupEvent  `json:"events"`
	Records []GroupRecord `json:"records"`
	owned   map[string]map[int32]bool
}

// Event records a change of member's partitions (none: nothing recorded).
func (g *GroupLog) Event(member, kind string, partitions []int32) {
	if len(partitions) == 0 {
		return
	}
	ps := append([]int32(nil), partitions...)
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	g.mu.Lock()
	defer g.mu.Unlock()
	g.Events = append(g.Events, GroupEvent{len(g.Events), member, kind, ps})
	if g.owned == nil {
		g.owned = map[string]map[int32]bool{}
	}
	if g.owned[member] == nil {
		g.owned[member] = map[int32]bool{}
	}
	for _, p := range ps {
		g.owned[member][p] = kind == "assigned"
	}
}

// Read records a record member read.
func (g *GroupLog) Read(member string, r Record) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.Records = append(g.Records, GroupRecord{member, r})
}

// Ownership is the partitions each member owns now.
func (g *GroupLog) Ownership() map[string][]int32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string][]int32{}
	for m, ps := range g.owned {
		for p, owned := range ps {
			if owned {
				out[m] = append(out[m], p)
			}
		}
		sort.Slice(out[m], func(i, j int) bool { return out[m][i] < out[m][j] })
	}
	return out
}

// Shared: members a and b both own partitions, and together all of them.
func (g *GroupLog) Shared(partitions int) bool {
	owned := g.Ownership()
	return len(owned["a"]) > 0 && len(owned["b"]) > 0 && len(owned["a"])+len(owned["b"]) == partitions
}

// CountPhase is how many records of phase were read.
func (g *GroupLog) CountPhase(phase string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, r := range g.Records {
		if strings.HasPrefix(r.Value, phase+"-") {
			n++
		}
	}
	return n
}

// Result is the log as the JSON result's fields.
func (g *GroupLog) Result() map[string]any {
	g.mu.Lock()
	defer g.mu.Unlock()
	return map[string]any{"events": g.Events, "records": g.Records}
}

// WaitFor polls cond until it holds; after wait, the program fails saying what.
func WaitFor(what string, wait time.Duration, cond func() bool) {
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			Fail("waiting", fmt.Errorf("%s: not within %s", what, wait))
		}
		time.Sleep(50 * time.Millisecond)
	}
	Logf("%s", what)
}
