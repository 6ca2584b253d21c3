python3 -m pip install -q --no-index --no-deps --target /tmp/site_w12 wheels/amso-*.whl
for v in w8 w16; do python3 -m pip install -q --no-index --no-deps --target /tmp/site_$v wheels_sweep/$v/*.whl; done
for i in 1 2 3; do for v in w12 w8 w16; do PYTHONPATH=/tmp/site_$v python3 scratch/sweep_t.py $v; done; done 2>&1 | tee $OUT/sweep_w.txt
