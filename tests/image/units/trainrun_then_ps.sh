# `sh trainrun_then_ps.sh ARGS`: runs `trainrun ARGS`, then lists the container's processes after a
# `processes after trainrun (script PID):` line; exits with trainrun's exit code.
trainrun "$@"
code=$?
echo "processes after trainrun (script $$):"
ps -eo pid=,stat=,args=
exit $code
