package main

import (
	"cmp"
	"slices"
)

// A placed attempt is one attempt's join and grant, as far as they are
// known. The attempt joined its key's queue after the counter read before
// and before it read after; it was granted its slot before every attempt
// of a higher rank, and equal ranks say nothing.
type placed struct {
	attemptKey
	key           string
	before, after int64
	rank          int64
}

// fifoBreak returns a pair that the gate served out of order, if there is
// one: first joined key's queue before second did (first's after is below
// second's before: first had joined when second's caller read the
// counter, and second joined later), yet second was granted before first
// (a lower rank). Pairs whose order is not known both ways are not judged.
func fifoBreak(as []placed) (first, second placed, found bool) {
	byKey := map[string][]placed{}
	for _, a := range as {
		byKey[a.key] = append(byKey[a.key], a)
	}
	for _, g := range byKey {
		if first, second, found = fifoBreakKey(g); found {
			return first, second, true
		}
	}
	return placed{}, placed{}, false
}

// fifoBreakKey is fifoBreak for the attempts of one key. From the highest
// rank down, it keeps the attempt that joined earliest among those of a
// strictly higher rank than the ones it looks at: any of those looked at
// that was sent after it joined was served before it.
func fifoBreakKey(as []placed) (first, second placed, found bool) {
	slices.SortFunc(as, func(a, b placed) int { return cmp.Compare(b.rank, a.rank) })
	var earliest *placed // of the higher ranks, the one that joined first
	for i := 0; i < len(as); {
		j := i
		for j < len(as) && as[j].rank == as[i].rank {
			if earliest != nil && earliest.after < as[j].before {
				return *earliest, as[j], true
			}
			j++
		}
		for k := i; k < j; k++ {
			if earliest == nil || as[k].after < earliest.after {
				earliest = &as[k]
			}
		}
		i = j
	}
	return placed{}, placed{}, false
}
