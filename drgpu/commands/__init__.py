"""The commands, each a thin orchestration of the core and the host (`plan`, `rendering`,
`up`, `down`, `gpus`, `status`, `report`, `doctor`, `cuda_check`, `swarm_setup`), and the
steps they share: the three ways a stack runs (`compose_run`, `swarm_deploy`, `drfc_stack`),
`options`, `preparation`, `run_lock`, `proving` and `rollback`. A command calls the shared
steps, never another command."""
