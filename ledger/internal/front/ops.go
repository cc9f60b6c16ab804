package front

import "sync"

// opID names one operation; its Op string is "<store>: <name>".
type opID int

const (
	opCreate opID = iota
	opCreateMany
	opGet
	opGetByKey
	opTransition
	opList
	opPrune
	opStartAttempt
	opFinishAttempt
	opAttempts
	opEvents
	opAppendEvent
	opGetStep
	opPutStep
	opBeginEffect
	opSetEffect
	opEffects
	opClaim
	opRelease
	opBeginRun
	opEndRun
	opRenewLeases
	opSetLanePaused
	opLaneEvents
	opPausedLanes
	opRegisterServer
	opRemoveServer
	opPruneServers
	opListServers
	opRecordHistory
	opListHistory
	opPruneHistory
	opNotify
	opListen
	opAppendStream
	opReadStream
	opLatestProgress
	opPruneStreams
	opPutWait
	opGetWait
	opSignalWait
	opExpireWait
	opFindWait
	opCreateTx
	opCreateOutbox
	opClaimOutbox
	opDoneOutbox
	opReleaseOutbox
	opOutboxStats
	opSchemaVersion
	opSeqAssign
	opSeqAcquire
	opSeqRelease
	nOps
)

var opNames = [nOps]string{
	opCreate:         "create",
	opCreateMany:     "create many",
	opGet:            "get",
	opGetByKey:       "get by key",
	opTransition:     "transition",
	opList:           "list",
	opPrune:          "prune",
	opStartAttempt:   "start attempt",
	opFinishAttempt:  "finish attempt",
	opAttempts:       "attempts",
	opEvents:         "events",
	opAppendEvent:    "append event",
	opGetStep:        "get step",
	opPutStep:        "put step",
	opBeginEffect:    "begin effect",
	opSetEffect:      "set effect",
	opEffects:        "effects",
	opClaim:          "dedup claim",
	opRelease:        "dedup release",
	opBeginRun:       "begin run",
	opEndRun:         "end run",
	opRenewLeases:    "renew leases",
	opSetLanePaused:  "set lane paused",
	opLaneEvents:     "lane events",
	opPausedLanes:    "paused lanes",
	opRegisterServer: "register server",
	opRemoveServer:   "remove server",
	opPruneServers:   "prune servers",
	opListServers:    "list servers",
	opRecordHistory:  "record history",
	opListHistory:    "list history",
	opPruneHistory:   "prune history",
	opNotify:         "notify",
	opListen:         "listen",
	opAppendStream:   "append stream",
	opReadStream:     "read stream",
	opLatestProgress: "latest progress",
	opPruneStreams:   "prune streams",
	opPutWait:        "put wait",
	opGetWait:        "get wait",
	opSignalWait:     "signal wait",
	opExpireWait:     "expire wait",
	opFindWait:       "find wait",
	opCreateTx:       "create in tx",
	opCreateOutbox:   "create outbox",
	opClaimOutbox:    "claim outbox",
	opDoneOutbox:     "done outbox",
	opReleaseOutbox:  "release outbox",
	opOutboxStats:    "outbox stats",
	opSchemaVersion:  "schema version",
	opSeqAssign:      "sequence assign",
	opSeqAcquire:     "sequence acquire",
	opSeqRelease:     "sequence release",
}

var (
	opsMu   sync.Mutex
	opsByDB = map[string]*[nOps]string{}
)

// opsOf returns the Op strings of store name, built once per name so that
// no call builds a string.
func opsOf(name string) *[nOps]string {
	opsMu.Lock()
	defer opsMu.Unlock()
	if o := opsByDB[name]; o != nil {
		return o
	}
	o := new([nOps]string)
	for i, n := range opNames {
		o[i] = name + ": " + n
	}
	opsByDB[name] = o
	return o
}
