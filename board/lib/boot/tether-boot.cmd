# tether's A/B boot for U-Boot boards (docs/updates.md). Compiled into boot.scr on the FAT
# boot partition (the partition U-Boot's distro boot finds: it is the one marked bootable).
# The build puts a board line first: `setenv tether_fdtfile <dtb>` (U-Boot boards) or
# nothing (the QEMU lab: the DT is the one QEMU made, at fdtcontroladdr).
#
# State: tether.env on this partition, `name=value` lines that `tether bootslot` writes from
# Linux (RAUC's custom boot backend) and this script rewrites when it spends a try:
#   tether_order    "a b" or "b a": the slots in the order they are tried
#   tether_X_state  good (boots every time), try (boots while tries are left), bad (never)
#   tether_X_left   tries left for a slot in state try
# A slot on trial loses one try here, before its kernel starts, so a boot that dies
# anywhere (kernel, daemon, health check) has used its try; when none are left the next slot
# in the order boots. No file, or one U-Boot cannot read: slot a, the slot flash.sh writes.
#   tether_extra_args  kernel arguments added to every boot (kept as they are)

setenv tether_order "a b"
setenv tether_a_state good
setenv tether_a_left 0
setenv tether_b_state bad
setenv tether_b_left 0
# Read the state somewhere other than ${scriptaddr}: this script runs from there.
if load ${devtype} ${devnum}:${distro_bootpart} ${pxefile_addr_r} tether.env; then
    env import -t ${pxefile_addr_r} ${filesize} tether_order tether_a_state tether_a_left tether_b_state tether_b_left tether_extra_args
fi

# The first slot in the order that may boot: good, or on trial with a try left (spent here).
# Hush has no indirect expansion: tether_lookup is built per slot, then run.
setenv tether_slot
setenv tether_spent
for s in ${tether_order}; do
    if test -z "${tether_slot}"; then
        setenv tether_lookup "setenv st \${tether_${s}_state}; setenv left \${tether_${s}_left}"
        run tether_lookup
        if test "${st}" = good; then
            setenv tether_slot ${s}
        elif test "${st}" = try && test ${left} -gt 0; then
            setexpr left ${left} - 1
            setenv tether_${s}_left ${left}
            setenv tether_slot ${s}
            setenv tether_spent 1
        fi
    fi
done
if test -z "${tether_slot}"; then
    echo "tether: no slot is good or has tries left; booting slot a"
    setenv tether_slot a
fi
if test -n "${tether_spent}"; then
    env export -t ${pxefile_addr_r} tether_order tether_a_state tether_a_left tether_b_state tether_b_left tether_extra_args
    fatwrite ${devtype} ${devnum}:${distro_bootpart} ${pxefile_addr_r} tether.env ${filesize}
fi

if test "${tether_slot}" = b; then setenv tether_part 3; else setenv tether_part 2; fi
echo "tether: booting slot ${tether_slot} (partition ${tether_part}; order ${tether_order})"
part uuid ${devtype} ${devnum}:${tether_part} tether_partuuid
load ${devtype} ${devnum}:${tether_part} ${kernel_addr_r} /vmlinuz
load ${devtype} ${devnum}:${tether_part} ${ramdisk_addr_r} /initrd.img
setenv tether_initrd ${ramdisk_addr_r}:${filesize}
setenv tether_fdt ${fdtcontroladdr}
if test -n "${tether_fdtfile}"; then
    if load ${devtype} ${devnum}:${tether_part} ${fdt_addr_r} /boot/dtbs/${tether_fdtfile}; then
        setenv tether_fdt ${fdt_addr_r}
    fi
fi
setenv bootargs "root=PARTUUID=${tether_partuuid} ro rootwait ${tether_console} panic=10 tether.slot=${tether_slot} tether.boot=u-boot rauc.slot=${tether_slot} ${tether_extra_args}"
booti ${kernel_addr_r} ${tether_initrd} ${tether_fdt}
echo "tether: booting slot ${tether_slot} failed"
