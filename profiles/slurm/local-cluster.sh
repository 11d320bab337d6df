#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, to exercise the SLURM profile for real (tests/integration/test_slurm.py).
#
#   profiles/slurm/local-cluster.sh start    # munged, slurmdbd, slurmctld, slurmd; waits for an idle node
#   profiles/slurm/local-cluster.sh status   # daemons and sinfo
#   profiles/slurm/local-cluster.sh stop     # stops the daemons it started, removes its folder
#   profiles/slurm/local-cluster.sh env      # the line to export so that sbatch/sacct/sinfo find it
#
# Needs Debian's packages (as root): apt-get install slurm-wlm slurmdbd munge mariadb-server
# Everything it writes lives in one folder it owns, $BANDPO_SLURM_DIR (default /tmp/bandpo-slurm): its munge key
# and socket, slurm.conf, slurmdbd.conf, a MariaDB data folder (job accounting for sacct), state, spool, logs, pid
# files. The daemons get these paths on the command line (no /etc/munge, /var/lib/mysql), and so do the clients,
# through SLURM_CONF, with one exception: inside a job the executor plugin's jobstep (0.6.x) removes SLURM_CONF from
# the environment of its `srun`, which then only finds /etc/slurm/slurm.conf. So `start` also links
# /etc/slurm/slurm.conf -> $DIR/slurm.conf (it refuses to start if that path exists already) and `stop` removes
# that link (only if it still points here), and /etc/slurm if it created it. The daemons run as the calling user.
# One node (this host) with all its CPUs and 90% of its memory, in one partition `cpu` (the profile's default).
set -euo pipefail

DIR=${BANDPO_SLURM_DIR:-/tmp/bandpo-slurm}
HOST=$(hostname -s)
USER_NAME=$(id -un)
DB_PORT=${BANDPO_SLURM_DB_PORT:-16033}     # MariaDB, local socket only (skip-networking); port unused but fixed
DBD_PORT=${BANDPO_SLURM_DBD_PORT:-16819}
CTLD_PORT=${BANDPO_SLURM_CTLD_PORT:-16817}
SLURMD_PORT=${BANDPO_SLURM_SLURMD_PORT:-16818}
DAEMONS=(slurmd slurmctld slurmdbd mariadb munged)   # stop order
SYSTEM_CONF=/etc/slurm/slurm.conf                    # the default path, for srun inside jobs (see above)

die() { echo "local-cluster: $*" >&2; exit 1; }
fail_start() {  # a failed start: show the logs, stop what was started
    local f
    for f in "$DIR"/log/*.log; do echo "== $f" >&2; tail -n 5 "$f" >&2; done
    stop
}
log() { echo "local-cluster: $*" >&2; }

MARK="# written by local-cluster.sh"
ours() { [[ -f "$DIR/slurm.conf" ]] && [[ "$(head -n 1 "$DIR/slurm.conf")" == "$MARK"* ]]; }  # never rm others' folders

pid_alive() { [[ -f "$DIR/run/$1.pid" ]] && kill -0 "$(cat "$DIR/run/$1.pid")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2; shift 2
    local end=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < end)) || die "timed out after ${limit}s waiting for $what (logs: $DIR/log)"
        sleep 0.5
    done
}

write_configs() {
    local cpus mem_mb
    cpus=$(nproc)
    mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
    mkdir -p "$DIR"/{run,log,state,spool,munge,key,db}
    chmod 755 "$DIR" "$DIR/munge"   # munged: its socket's folders must be searchable by all
    chmod 700 "$DIR/key"
    cat >"$DIR/slurm.conf" <<EOF
$MARK: one node, one partition, accounting in slurmdbd (for sacct)
ClusterName=bandpo
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$USER_NAME
SlurmdUser=$USER_NAME
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd.%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$DIR/munge/munge.socket   # the munge socket for slurmdbd connections
AccountingStoreFlags=job_comment   # sacct shows the plugin's comment: rule_<name>_wildcards_...
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
MinJobAge=300
SchedulerParameters=sched_interval=2
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=cpu Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$DIR/slurmdbd.conf" <<EOF
# written by local-cluster.sh
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=$USER_NAME
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=$USER_NAME
EOF
    chmod 600 "$DIR/slurmdbd.conf"
    cat >"$DIR/my.cnf" <<EOF
[mysqld]
datadir=$DIR/db/data
socket=$DIR/db/mysqld.sock
pid-file=$DIR/run/mariadb.pid
log-error=$DIR/log/mariadb.log
skip-networking
port=$DB_PORT
innodb_buffer_pool_size=64M
innodb_log_file_size=16M
innodb_lock_wait_timeout=900
EOF
}

start() {
    for cmd in munged slurmctld slurmd slurmdbd sinfo sbatch sacct mariadbd mariadb-install-db; do
        command -v "$cmd" >/dev/null || die "'$cmd' not found: apt-get install slurm-wlm slurmdbd munge mariadb-server"
    done
    if [[ -e "$DIR" ]]; then
        ours || die "$DIR exists and was not made by this script: remove it or set BANDPO_SLURM_DIR"
        for d in "${DAEMONS[@]}"; do pid_alive "$d" && die "already running ($d, $DIR); '$0 stop' first"; done
        rm -rf "$DIR"   # a folder left by a killed run: ours, nothing running from it
    fi
    # a link left by a killed run of this script points into $DIR, where nothing runs now (checked above): remove it
    if [[ -L "$SYSTEM_CONF" && "$(readlink "$SYSTEM_CONF")" == "$DIR/slurm.conf" ]]; then
        rm "$SYSTEM_CONF"
        log "removed $SYSTEM_CONF, a link left by a killed run"
    fi
    [[ -e "$SYSTEM_CONF" || -L "$SYSTEM_CONF" ]] && die "$SYSTEM_CONF exists: another SLURM set-up on this machine?"
    write_configs
    trap fail_start EXIT
    if [[ ! -d "$(dirname "$SYSTEM_CONF")" ]]; then
        mkdir -p "$(dirname "$SYSTEM_CONF")"
        touch "$DIR/run/created-system-conf-dir"
    fi
    ln -s "$DIR/slurm.conf" "$SYSTEM_CONF"

    dd if=/dev/urandom of="$DIR/key/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/key/munge.key"
    munged --key-file="$DIR/key/munge.key" --socket="$DIR/munge/munge.socket" \
        --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/key/munged.seed"
    wait_for 10 munged pid_alive munged

    mariadb-install-db --defaults-file="$DIR/my.cnf" --user="$USER_NAME" --auth-root-authentication-method=socket \
        >"$DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: $DIR/log/mariadb-install.log"
    mariadbd --defaults-file="$DIR/my.cnf" --user="$USER_NAME" >>"$DIR/log/mariadb.log" 2>&1 &
    wait_for 60 mariadb mariadb --socket="$DIR/db/mysqld.sock" -e "select 1"

    export SLURM_CONF="$DIR/slurm.conf"
    MYSQL_UNIX_PORT="$DIR/db/mysqld.sock" slurmdbd   # reads slurmdbd.conf beside $SLURM_CONF
    wait_for 60 slurmdbd timeout 10 sacctmgr -i list cluster
    # the cluster, an account `bandpo` and this user in it (the executor plugin checks accounts with sacctmgr)
    timeout 30 sacctmgr -i add cluster bandpo >/dev/null
    timeout 30 sacctmgr -i add account bandpo cluster=bandpo >/dev/null
    timeout 30 sacctmgr -i add user "$USER_NAME" account=bandpo defaultaccount=bandpo cluster=bandpo >/dev/null
    slurmctld -f "$DIR/slurm.conf"
    wait_for 60 slurmctld timeout 10 scontrol ping
    slurmd -f "$DIR/slurm.conf"
    wait_for 60 "node $HOST idle" node_idle
    trap - EXIT
    log "up: node $HOST idle in partition cpu; export SLURM_CONF=$DIR/slurm.conf"
}

node_idle() { [[ "$(sinfo -h -n "$HOST" -o %t)" == idle ]]; }

stop() {
    [[ -d "$DIR" ]] || { log "not running ($DIR absent)"; return 0; }
    ours || die "$DIR was not made by this script: left alone"
    local d pid
    for d in "${DAEMONS[@]}"; do
        pid_alive "$d" || continue
        pid=$(cat "$DIR/run/$d.pid")
        kill "$pid"
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -0 "$pid" 2>/dev/null && { log "$d ($pid) did not stop on TERM: KILL"; kill -9 "$pid"; }
    done
    if [[ -L "$SYSTEM_CONF" && "$(readlink "$SYSTEM_CONF")" == "$DIR/slurm.conf" ]]; then
        rm "$SYSTEM_CONF"
        [[ -f "$DIR/run/created-system-conf-dir" ]] && rmdir "$(dirname "$SYSTEM_CONF")"
    fi
    rm -rf "$DIR"
    log "stopped; $DIR removed"
}

status() {
    local d up=0
    for d in "${DAEMONS[@]}"; do
        if pid_alive "$d"; then echo "$d: running (pid $(cat "$DIR/run/$d.pid"))"; else echo "$d: stopped"; up=1; fi
    done
    if ((up == 0)); then SLURM_CONF="$DIR/slurm.conf" sinfo; fi
    return $up
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    env) echo "export SLURM_CONF=$DIR/slurm.conf" ;;
    *) die "usage: $0 start|stop|status|env" ;;
esac
