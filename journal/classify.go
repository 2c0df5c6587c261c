package journal

import "github.com/outlast-llm/outlast"

// The classes of an attempt's failure, as [ClassOf] names them and
// [Attempt.ErrorClass] keeps them: the root package's.
const (
	ClassStatus      = outlast.ClassStatus
	ClassErrorEvent  = outlast.ClassErrorEvent
	ClassBusy        = outlast.ClassBusy
	ClassStalled     = outlast.ClassStalled
	ClassClosedEarly = outlast.ClassClosedEarly
	ClassCanceled    = outlast.ClassCanceled
	ClassRefused     = outlast.ClassRefused
	ClassReset       = outlast.ClassReset
	ClassTimeout     = outlast.ClassTimeout
	ClassOther       = outlast.ClassOther
)

// ClassOf returns the class of an attempt's failure, or "" for nil; it is
// outlast.Classify.
func ClassOf(err error) string { return outlast.Classify(err) }
