package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// envRedis names the variable that gives --redis its default, the one the
// repository's Redis tests read.
const envRedis = "OUTLAST_TEST_REDIS"

// fallbackRedis is --redis when envRedis is unset.
const fallbackRedis = "redis://127.0.0.1:6379/0"

// defaultRedisURL is --redis's default: $OUTLAST_TEST_REDIS, else the
// local Redis.
func defaultRedisURL() string {
	if u := os.Getenv(envRedis); u != "" {
		return u
	}
	return fallbackRedis
}

// config is what one run measures. Every count and duration in it bounds a
// loop, so that a run ends by itself.
type config struct {
	RedisURL   string        `json:"-"`           // it may hold a password
	Iterations int           `json:"iterations"`  // uncontended acquire+release pairs per gate
	Processes  int           `json:"processes"`   // child processes of the contended redisgate run
	Goroutines int           `json:"goroutines"`  // contending goroutines in all
	Capacity   int           `json:"capacity"`    // the contended key's slots
	Hold       time.Duration `json:"hold_ns"`     // each contended holder's work
	Duration   time.Duration `json:"duration_ns"` // each contended run
	Handoffs   int           `json:"handoffs"`    // measured hand-offs per setup
	Goal       time.Duration `json:"goal_ns"`     // the hand-off p99 to stay under
	Check      bool          `json:"check"`
	JSON       bool          `json:"-"`
}

// defaults is the configuration of a plain run: about forty seconds on a
// 2-core machine.
func defaults() config {
	return config{
		RedisURL:   defaultRedisURL(),
		Iterations: 20000,
		Processes:  3,
		Goroutines: 64,
		Capacity:   4,
		Hold:       time.Millisecond,
		Duration:   10 * time.Second,
		Handoffs:   2000,
		Goal:       5 * time.Millisecond,
	}
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	c := defaults()
	fs := flag.NewFlagSet("redisgate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./redisgate [flags]\n\n"+
			"Measures package redisgate's Gate against the in-process gate on a Redis: uncontended acquire+release,\n"+
			"contention across processes, and the hand-off from a release to the next holder. Prints markdown tables.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.RedisURL, "redis", c.RedisURL, "the Redis to use, as a redis:// `URL`; the default is $"+envRedis+" if set")
	fs.IntVar(&c.Iterations, "iterations", c.Iterations, "uncontended acquire+release pairs per gate")
	fs.IntVar(&c.Processes, "processes", c.Processes, "child processes that share the contended redisgate key")
	fs.IntVar(&c.Goroutines, "goroutines", c.Goroutines, "contending goroutines in all, split evenly over --processes for redisgate")
	fs.IntVar(&c.Capacity, "capacity", c.Capacity, "slots of the contended key")
	fs.DurationVar(&c.Hold, "hold", c.Hold, "how long each contending holder works before it releases")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long each gate is contended")
	fs.IntVar(&c.Handoffs, "handoffs", c.Handoffs, "measured hand-offs per setup")
	fs.DurationVar(&c.Goal, "goal", c.Goal, "the redisgate hand-off p99 to stay under")
	fs.BoolVar(&c.Check, "check", c.Check, "also exit 1 unless every redisgate hand-off p99 is under --goal")
	fs.BoolVar(&c.JSON, "json", c.JSON, "print JSON instead of markdown")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, usageError{Err: err}
	}
	if fs.NArg() > 0 {
		return c, usageError{Err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return c, c.validate()
}

func (c config) validate() error {
	switch {
	case c.Iterations < 1 || c.Handoffs < 1:
		return usageError{Err: fmt.Errorf("--iterations %d, --handoffs %d: want 1 or more", c.Iterations, c.Handoffs)}
	case c.Processes < 1 || c.Goroutines < c.Processes:
		return usageError{Err: fmt.Errorf("--processes %d, --goroutines %d: want 1 or more processes, and at least one goroutine each", c.Processes, c.Goroutines)}
	case c.Capacity < 1:
		return usageError{Err: fmt.Errorf("--capacity %d: want 1 or more", c.Capacity)}
	case c.Hold < 0 || c.Duration <= 0 || c.Goal <= 0:
		return usageError{Err: fmt.Errorf("--hold %v, --duration %v, --goal %v: want 0 or more, and more than 0 for the others", c.Hold, c.Duration, c.Goal)}
	}
	return nil
}

// share returns how many of the contending goroutines process i of the
// contended redisgate run gets: the same for each, give or take one.
func (c config) share(i int) int {
	n := c.Goroutines / c.Processes
	if i < c.Goroutines%c.Processes {
		n++
	}
	return n
}
