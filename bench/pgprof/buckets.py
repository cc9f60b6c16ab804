#!/usr/bin/env python3
"""Bucket perf samples of postgres backends by phase (first rule whose
function is anywhere in the sample's call chain wins).
usage: perf script -F pid,ip,sym -i perf.data | buckets.py pids.txt"""
import sys, collections
RULES = [
 ('commit: WAL flush (XLogFlush/fdatasync)', ['XLogFlush','issue_xlog_fsync','XLogWrite','fdatasync']),
 ('NOTIFY (queue, signal listeners, deliver)', ['PreCommit_Notify','AtCommit_Notify','SignalBackends','asyncQueueAddEntries','Async_Notify','pg_notify','asyncQueueAdvanceTail','asyncQueueProcessPageEntries','asyncQueueReadAllNotifications','ProcessNotifyInterrupt','ProcessCompletedNotifies','asyncQueueNotificationToEntry','HandleNotifyInterrupt']),
 ('signals (SIGUSR1 handler)', ['procsignal_sigusr1_handler','__GI___kill','kill']),
 ('commit: other', ['CommitTransaction','RecordTransactionCommit','CommitTransactionCommand','ProcArrayEndTransaction','AtEOXact_Buffers','AtEOXact_RelationCache','AtEOXact_Inval','AtEOXact_CatCache']),
 ('GUC (set_config, reset at end)', ['set_config_by_name','AtEOXact_GUC','set_config_option','set_config_option_ext']),
 ('planning', ['pg_plan_queries','pg_plan_query','planner','standard_planner','BuildCachedPlan','expression_planner','subquery_planner']),
 ('parse/analyze/rewrite', ['pg_parse_query','raw_parser','base_yyparse','parse_analyze_fixedparams','parse_analyze_varparams','pg_analyze_and_rewrite_fixedparams','pg_analyze_and_rewrite_varparams','pg_rewrite_query','RevalidateCachedQuery','CompleteCachedPlan','CreateCachedPlan','transformTopLevelStmt','QueryRewrite']),
 ('plan cache check/locks', ['GetCachedPlan','CheckCachedPlan','AcquireExecutorLocks','AcquirePlannerLocks']),
 ('index maintenance (incl. its WAL)', ['ExecInsertIndexTuples','btinsert','_bt_doinsert','index_insert']),
 ('ON CONFLICT arbiter check', ['ExecCheckIndexConstraints','check_exclusion_or_unique_constraint']),
 ('WAL insert (heap records)', ['XLogInsert','XLogInsertRecord','CopyXLogRecordToWAL','XLogRecordAssemble']),
 ('triggers', ['AfterTriggerEndQuery','AfterTriggerSaveEvent','ExecARInsertTriggers','ExecARUpdateTriggers','plpgsql_exec_trigger','ExecCallTriggerFunc','AfterTriggerFireDeferred','AfterTriggerBeginQuery','ExecASInsertTriggers','ExecBSInsertTriggers','ExecASUpdateTriggers','ExecBSUpdateTriggers','AfterTriggerEndXact']),
 ('heap insert/update/lock/prune', ['heap_insert','heap_update','heap_multi_insert','heap_page_prune_opt','RelationGetBufferForTuple','heap_lock_tuple','heap_page_prune','ExecLockRows']),
 ('index scans (lookups)', ['index_getnext_slot','index_getnext_tid','_bt_first','_bt_search','btgettuple','index_fetch_heap','index_beginscan','index_rescan','ExecIndexScan']),
 ('lock manager', ['LockAcquireExtended','LockRelease','LockReleaseAll','LockRelationOid','UnlockRelationId','LockAcquire','LockTuple','XactLockTableInsert']),
 ('executor start (init plan tree)', ['ExecutorStart','standard_ExecutorStart','InitPlan','ExecInitNode','CreateExecutorState','ExecInitModifyTable']),
 ('executor end', ['ExecutorEnd','standard_ExecutorEnd','ExecEndNode','FreeExecutorState','PortalDrop','PortalCleanup']),
 ('executor run (expressions, CTEs, scans)', ['ExecutorRun','standard_ExecutorRun','ExecutorFinish','standard_ExecutorFinish','PortalRun','PortalRunMulti','PortalStart']),
 ('bind: receive parameters', ['ReceiveFunctionCall','OidReceiveFunctionCall','array_recv','CreatePortal']),
 ('send results', ['printtup','SendRowDescriptionMessage','pq_endmessage','pq_flush','internal_flush','secure_write','socket_flush','pq_putmessage']),
 ('client read / wait', ['pq_getbyte','secure_read','WaitEventSetWait','epoll_wait','pq_getmessage','pq_startmsgread','pq_getbytes']),
 ('start transaction', ['StartTransaction','StartTransactionCommand']),
]
listen = set()
if len(sys.argv) > 1:
    for line in open(sys.argv[1]):
        p = line.split('|')
        if len(p) >= 3 and p[2].startswith('LISTEN'):
            listen.add(p[0])
counts = {'writers': collections.Counter(), 'listen': collections.Counter()}
tot = collections.Counter()
def flush(pid, syms):
    if pid is None: return
    role = 'listen' if pid in listen else 'writers'
    b = None
    s = set(syms)
    for name, fns in RULES:
        if any(f in s for f in fns):
            b = name; break
    if b is None:
        user = [x for x in syms if x and not x.startswith('[') ]
        b = 'other postgres' if any(x in s for x in ('PostgresMain','main')) else 'kernel/unknown only'
    counts[role][b] += 1
    tot[role] += 1
pid = None; syms = []
for line in sys.stdin:
    line = line.rstrip('\n')
    if not line.strip():
        flush(pid, syms); pid = None; syms = []; continue
    # A sample's header is its pid, right-aligned (a leading space when
    # the pid has fewer digits than the widest); its frames start with a tab.
    if not line.startswith('\t'):
        flush(pid, syms); syms = []
        pid = line.split('/')[0].strip()
        continue
    parts = line.strip().split(None, 1)
    if len(parts) == 2:
        syms.append(parts[1].replace(' (inlined)', ''))
flush(pid, syms)
all_ = tot['writers'] + tot['listen']
print(f"samples: writers {tot['writers']}, listen {tot['listen']}")
for role in ('writers', 'listen'):
    print(f"\n{role} ({tot[role]} samples, {100*tot[role]/max(all_,1):.1f}% of all)")
    for b, n in counts[role].most_common():
        print(f"  {100*n/max(tot[role],1):5.1f}%  {b}")
