python3 -m pip install -q --no-index --no-deps --target /tmp/site_c16d4 wheels/amso-*.whl
for v in c8d4 c8d8 c4d8 c32d2; do python3 -m pip install -q --no-index --no-deps --target /tmp/site_$v wheels_sweep/$v/*.whl; done
for i in 1 2 3; do for v in c16d4 c8d4 c8d8 c4d8 c32d2; do PYTHONPATH=/tmp/site_$v python3 scratch/sweep_t.py $v; done; done 2>&1 | tee $OUT/sweep.txt
