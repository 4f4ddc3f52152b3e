# Prints one line per run of scripts/profile-cost: instructions, commands
# and script calls per job for each phase, from callgrind's dumps and the
# command counts the probe logged at each.
import re
import sys

out_base, cmd_log, label, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def instr(i):
    for line in open(f'{out_base}.{i}'):
        if line.startswith('summary:'):
            return int(line.split()[1])
    raise SystemExit(f'no summary in {out_base}.{i}')


snaps = []
for line in open(cmd_log):
    if line.startswith('== '):
        snaps.append({})
    m = re.match(r'cmdstat_([^:]+):calls=(\d+)', line)
    if m and snaps:
        snaps[-1][m.group(1)] = int(m.group(2))
names = ['enqueue', 'process'] if len(snaps) == 3 else ['enqueue', 'claim', 'settle']
skip = {'info', 'fcall', 'function|load', 'ping', 'client|setinfo', 'config|get', 'hello', 'client|id'}
cells = []
for i, name in enumerate(names):
    a, b = snaps[i], snaps[i + 1]
    cmds = sum(v - a.get(k, 0) for k, v in b.items() if k not in skip)
    calls = b.get('fcall', 0) - a.get('fcall', 0)
    cells.append(f'{name} {instr(i + 1) / n / 1000:.1f}k instr, {cmds / n:.2f} cmds, {calls / n:.3f} calls')
print(f'{label:<10} ' + ' | '.join(cells))
if len(sys.argv) > 5 and sys.argv[5] == 'detail':
    for i, name in enumerate(names):
        a, b = snaps[i], snaps[i + 1]
        rows = sorted(((v - a.get(k, 0)) / n, k) for k, v in b.items() if k not in skip and v != a.get(k, 0))
        print(f'  {name}: ' + ', '.join(f'{k} {c:.2f}' for c, k in reversed(rows)))
